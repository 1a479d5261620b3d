"""Mode ``async``: explorers in processes of their own, the learner ranks in the launch's, joined by
bounded links.

::

    explorer processes (explorer_process.py)         learner ranks (this module, the runner's)
      rollout(step) with weights version v  --link-->  leader: step s from each of its explorers
                                                        every rank: its prompts' groups -> buffer
                                                        -> Learner.step(s) (DDP/FSDP) -> record
      load_newer(...) <-- WeightChannel <-- broadcast <-  publish every sync_interval steps

The explorers run freely ahead of the learner, at most ``max(synchronizer.sync_offset, 1)`` steps
waiting in each link; the learner drops rows past ``synchronizer.max_staleness`` as in mode ``both``.
Mode ``both`` with ``synchronizer.explorer_process`` runs the same processes with a
:class:`~trinity_core.train.modes.step_gate.StepGate`: the explorers then run exactly ``sync_offset``
steps ahead and each rollout gets the weight version the explorer thread would give it.

Where the processes are (:mod:`~trinity_core.train.modes.layout`): explorer ``e`` on machine
``e mod machines``, started by that machine's first rank, which takes its steps
(:class:`~trinity_core.train.modes.explorers.ExplorerSet`); every learner rank gets every step's
shipments and keeps the groups of its prompts (:mod:`~trinity_core.train.modes.shipments`); the weights
reach other machines by a broadcast (:mod:`~trinity_core.train.modes.groups`).

Faults: every wait is bounded (``synchronizer.timeout``) and polls the other side. An explorer that fails
or dies is restarted (``synchronizer.explorer_restarts``) or stops the run with :class:`ExplorerFailed`
naming it; a learner rank that ends, for whatever reason, takes the launch down (its peers' collectives
fail, the launcher ends the rest) and its explorers stop within a poll interval of noticing. No process
outlives the run: the leader stops its explorers on every way out.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from trinity_core.train.modes.explorers import (
    STARTUP_S,
    STOP_GRACE_S,
    ExplorerFailed,
    ExplorerSet,
    explorer_context,
)
from trinity_core.train.modes.groups import RankGroups
from trinity_core.train.modes.layout import Layout
from trinity_core.train.modes.shipments import pack, rank_share, step_metrics, step_shipments, unpack
from trinity_core.train.modes.synchronizer import WeightChannel
from trinity_core.train.modes.threads import thread_budget, use_threads

if TYPE_CHECKING:
    from trinity_core.train.modes.runner import Runner

__all__ = ["STOP_GRACE_S", "ExplorerFailed", "explorer_context", "run_async"]


def run_async(runner: Runner, *, ordered: bool = False) -> None:
    """Run the remaining steps of ``runner`` with its explorers in processes of their own.

    ``ordered`` (mode ``both`` with ``synchronizer.explorer_process``): the explorers run exactly
    ``sync_offset`` steps ahead, kept there by a :class:`StepGate`; otherwise they run ahead freely.
    """
    config, learner, sync, layout = runner.config, runner.learner, runner.synchronizer, runner.layout
    # Processes on the same cores: each its thread budget (oversubscribed OpenMP threads spin at every
    # barrier and slow all of them down many times over).
    budget = thread_budget(config)
    restore_threads = use_threads(budget.learner)
    groups = RankGroups(layout, config.synchronizer.method, STARTUP_S + config.synchronizer.timeout + 60)
    explorers = _start_explorers(runner, groups, budget.explorer, ordered)
    try:
        last = time.perf_counter()
        for step in range(runner.start_step, runner.total_steps):
            # 1. Step s of every explorer, this rank's share of it into the buffer.
            metrics, explorer_idle = _receive_step(runner, groups, explorers, step)

            # 2. The learner's step, metrics, checkpoint.
            t_learn = time.perf_counter()
            metrics.update(learner.step(step))
            now = time.perf_counter()
            wall, learner_busy, last = now - last, now - t_learn, now
            explorer_busy = (1.0 - explorer_idle) * wall  # the explorers' own idle share
            out = runner.recorder.finish(step, metrics, wall, explorer_busy, learner_busy)
            runner.recorder.record(step, out, checkpoint=True)

            # 3. Weights to the explorers (ordered: once they have started the rollouts with the old ones).
            if sync.due(learner.version):
                _publish(runner, groups, explorers, step)
            if explorers is not None:
                explorers.mark_learned(step)
    finally:
        if explorers is not None:
            explorers.stop()
        use_threads(restore_threads)
    runner.weight_broadcasts = groups.broadcasts


def _start_explorers(runner: Runner, groups: RankGroups, threads: int, ordered: bool) -> ExplorerSet | None:
    """This machine's weights channel with the learner's current weights, and its explorers (on its
    leader rank, when explorers run on the machine; None elsewhere). Every rank calls it."""
    layout, learner, method = runner.layout, runner.learner, runner.config.synchronizer.method
    state = groups.weights(runner.acc, learner.model, learner.policy)
    sync_dir, channel = runner.run_dir / "sync", None
    if layout.local_explorers and state is not None:  # rank 0; other machines' leaders with memory
        channel = WeightChannel(method, state, learner.version, sync_dir, explorer_context())
    groups.written()  # checkpoint on several machines: rank 0's file is there before the others look
    if layout.local_explorers and state is None:
        channel = WeightChannel(method, None, learner.version, sync_dir, explorer_context())
    if channel is None:
        return None
    return ExplorerSet(runner, layout, channel, threads, ordered)


def _receive_step(
    runner: Runner, groups: RankGroups, explorers: ExplorerSet | None, step: int
) -> tuple[dict[str, torch.Tensor], float]:
    """Step ``step`` of every explorer (each leader takes its machine's, every rank gets all), this rank's
    share into the buffer; return the explorers' metrics and mean idle fraction."""
    layout: Layout = runner.layout
    mine = pack(explorers.receive(step)) if explorers is not None else b""
    blobs = [blob for raw in groups.gather(mine) for blob in unpack(raw)]
    shipments = step_shipments(blobs, step, layout.explorers)
    experiences = rank_share(shipments, layout, runner.config.rollout.prompts_per_step)
    runner.report.sample_experiences(step, experiences)
    runner.event_loop.run_until_complete(runner.explorer.writer.write(experiences))
    return step_metrics(shipments)


def _publish(runner: Runner, groups: RankGroups, explorers: ExplorerSet | None, step: int) -> None:
    """The learner's new weights to every explorer (every rank calls it: gathering and broadcasting them
    are collective)."""
    learner = runner.learner
    state: Any = groups.weights(runner.acc, learner.model, learner.policy)
    if state is not None:  # written or copied here first, then the others may look
        if explorers is not None:
            explorers.publish(state, learner.version, step)
        groups.written()
    else:
        groups.written()
        if explorers is not None:
            explorers.publish(None, learner.version, step)
