"""Mode ``async``: the explorer in a process of its own, the learner in this one, joined by a bounded link.

::

    explorer process (async_explorer.py)            learner process (this module, the runner's)
      rollout(step) with weights version v  --link-->  buffer -> Learner.step(step) -> record, checkpoint
      load_newer(...) <----- WeightChannel <---------  publish(policy, version) every sync_interval steps

The explorer runs freely ahead of the learner, at most ``max(synchronizer.sync_offset, 1)`` steps
waiting in the link; the learner drops rows past ``synchronizer.max_staleness`` as in mode ``both``.
Mode ``both`` with ``synchronizer.explorer_process`` runs the same two processes with a
:class:`~trinity_core.train.modes.step_gate.StepGate`: the explorer then runs exactly ``sync_offset`` steps
ahead and each rollout gets the weight version the explorer thread would give it.

Faults: every wait is bounded (``synchronizer.timeout``) and polls the other side. If the explorer
process fails or dies, the learner raises :class:`ExplorerFailed` naming it and its error or signal; if
the learner process ends, for whatever reason (an error, Ctrl-C, ``kill -9``), the explorer stops
within a poll interval of noticing. No process outlives the run: the learner stops the explorer (stop
event, then terminate, then kill) on every way out.
"""

from __future__ import annotations

import pickle
import queue
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.multiprocessing as mp

from trinity_core import registry
from trinity_core.codec import deserialize_many
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.modes.explorer_process import POLL_S, ExplorerSpec, Shipment, explorer_process
from trinity_core.train.modes.step_gate import StepGate
from trinity_core.train.modes.synchronizer import WeightChannel
from trinity_core.train.modes.threads import child_environment, thread_budget, use_threads

if TYPE_CHECKING:
    from trinity_core.train.modes.runner import Runner

__all__ = ["STOP_GRACE_S", "ExplorerFailed", "check_explorer_process", "explorer_context", "run_async"]

STOP_GRACE_S = 5.0
"""Seconds the explorer process gets to end after the stop event before it is terminated."""
STARTUP_S = 600.0
"""Seconds the explorer process may take to start (imports, model) before ``synchronizer.timeout`` runs."""


class ExplorerFailed(RuntimeError):
    """The explorer process (mode ``async``, or ``synchronizer.explorer_process``) failed, died or went
    silent."""


def check_explorer_process(config: ResolvedConfig, processes: int) -> None:
    """Refuse an explorer process where it cannot run: several learner processes, or
    ``synchronizer.explorer_process`` outside mode ``both`` with ``sync_offset > 0``.

    Raises:
        ConfigError: at ``mode`` or ``synchronizer.explorer_process``, saying what to change.
    """
    sync = config.synchronizer
    if sync.explorer_process and (config.mode != "both" or sync.sync_offset == 0):
        where = f"mode {config.mode}" if config.mode != "both" else "sync_offset 0 (lock step)"
        raise ConfigError(
            [
                ConfigProblem(
                    "synchronizer.explorer_process",
                    f"an explorer process is for mode both with sync_offset > 0; this run has {where}",
                    hint="set synchronizer.sync_offset: 1 (mode async always has an explorer process), "
                    "or remove synchronizer.explorer_process",
                )
            ]
        )
    if processes > 1 and (config.mode == "async" or sync.explorer_process):
        key = "mode" if config.mode == "async" else "synchronizer.explorer_process"
        raise ConfigError(
            [
                ConfigProblem(
                    key,
                    f"an explorer process serves one learner process; this launch has {processes}",
                    hint="launch one process, or use mode both with the explorer in a thread for several",
                )
            ]
        )


def run_async(runner: Runner, *, ordered: bool = False) -> None:
    """Run the remaining steps of ``runner`` with its explorer in a process of its own.

    ``ordered`` (mode ``both`` with ``synchronizer.explorer_process``): the explorer runs exactly
    ``sync_offset`` steps ahead, kept there by a :class:`StepGate`; otherwise it runs ahead freely.
    """
    config, learner, sync = runner.config, runner.learner, runner.synchronizer
    # Two processes on the same cores: each its thread budget (oversubscribed OpenMP threads spin at
    # every barrier and slow both down many times over).
    budget = thread_budget(config)
    restore_threads = use_threads(budget.learner)
    ctx = explorer_context()
    channel = WeightChannel(
        config.synchronizer.method, learner.policy, learner.version, runner.run_dir / "sync", ctx
    )
    spec = _explorer_spec(runner, ctx, channel, budget.explorer, ordered)
    process = ctx.Process(target=explorer_process, args=(spec,), name="trinity-explorer", daemon=True)
    with child_environment(budget.explorer):  # read by OpenMP when the explorer imports torch
        process.start()
    gate = spec.gate
    try:
        last = time.perf_counter()
        for step in range(runner.start_step, runner.total_steps):
            # 1. The explorer's step from the link (waits while the buffer is empty) into the buffer.
            shipment = _receive(spec, process, step, runner.run_dir)
            experiences = deserialize_many(shipment.experiences)
            runner.report.sample_experiences(step, experiences)
            runner.event_loop.run_until_complete(runner.explorer.writer.write(experiences))
            metrics = {k: torch.tensor(v, dtype=torch.float64) for k, v in shipment.metrics.items()}

            # 2. The learner's step, metrics, checkpoint.
            t_learn = time.perf_counter()
            metrics.update(learner.step(step))
            now = time.perf_counter()
            wall, learner_busy, last = now - last, now - t_learn, now
            explorer_busy = (1.0 - shipment.idle_fraction) * wall  # the explorer's own idle share
            out = runner.recorder.finish(step, metrics, wall, explorer_busy, learner_busy)
            runner.recorder.record(step, out, checkpoint=True)

            # 3. Weights to the explorer (ordered: once it has started the rollouts that keep the old ones).
            if sync.due(learner.version):
                if gate is not None and step + gate.offset < runner.total_steps:
                    _await_explorer(spec, gate, process, step, runner.run_dir)
                channel.publish(learner.policy, learner.version)
            if gate is not None:
                gate.mark_learned(step)
    finally:
        stop_explorer(spec, process)
        use_threads(restore_threads)


def _explorer_spec(
    runner: Runner, ctx: Any, channel: WeightChannel, threads: int, ordered: bool
) -> ExplorerSpec:
    """What the explorer process is started with: the run, its link, events and weights channel."""
    config = runner.config
    return ExplorerSpec(
        config=config,
        start_step=runner.start_step,
        total_steps=runner.total_steps,
        threads=threads,
        link=ctx.Queue(maxsize=max(config.synchronizer.sync_offset, 1)),
        errors=ctx.Queue(),
        stop=ctx.Event(),
        ready=ctx.Event(),
        weights=channel,
        registrations=_registrations(),
        gate=StepGate(ctx, runner.synchronizer.offset, runner.start_step) if ordered else None,
    )


def explorer_context() -> Any:
    """The multiprocessing context that starts explorer processes.

    A fork server with the explorer's module (torch, transformers) imported once: only the first explorer
    of a Python process pays for those imports, later runs in the same process (a notebook, a sweep, a
    test session) start theirs at once. The server is started with the first explorer's environment
    (:func:`~trinity_core.train.modes.threads.child_environment`); each explorer sets its own thread count.
    It never touches CUDA, so its children may. Spawn where there is no fork server (Windows).
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["trinity_core.train.modes.explorer_process"])
    return ctx


def stop_explorer(spec: ExplorerSpec, process: Any) -> None:
    """End the explorer process: the stop event, then SIGTERM, then SIGKILL; each bounded."""
    spec.stop.set()
    process.join(STOP_GRACE_S)
    if process.is_alive():
        process.terminate()
        process.join(STOP_GRACE_S)
    if process.is_alive():
        process.kill()
        process.join()
    spec.link.cancel_join_thread()  # what is left in the link is dropped, not waited for
    spec.errors.cancel_join_thread()


def _receive(spec: ExplorerSpec, process: Any, step: int, run_dir: Path) -> Shipment:
    """The next shipment; raises :class:`ExplorerFailed` when the explorer dies or stays silent.

    The wait is bounded by ``synchronizer.timeout``, counted from when the explorer process is ready
    (its start is bounded by :data:`STARTUP_S`).
    """
    timeout, began = spec.config.synchronizer.timeout, time.perf_counter()
    start = began
    while True:
        try:
            shipment: Shipment = pickle.loads(spec.link.get(timeout=POLL_S))
            return shipment
        except queue.Empty:
            now = time.perf_counter()
            _check_explorer(spec, process, step, run_dir)
            if not spec.ready.is_set():
                start = now
                if now - began > STARTUP_S:
                    raise ExplorerFailed(
                        f"the explorer process (pid {process.pid}) did not start within {STARTUP_S:g}s"
                        + _resume_hint(run_dir)
                    ) from None
            elif now - start > timeout:
                raise ExplorerFailed(
                    f"the explorer process (pid {process.pid}) sent no experiences for {timeout:g}s "
                    f"(learner step {step + 1}); raise synchronizer.timeout if its steps are that slow"
                    + _resume_hint(run_dir)
                ) from None


def _await_explorer(spec: ExplorerSpec, gate: StepGate, process: Any, step: int, run_dir: Path) -> None:
    """Wait until the explorer has started rollout ``step + sync_offset`` (ordered mode ``both``)."""
    try:
        gate.wait(
            lambda: gate.learner_may_publish(step),
            lambda: _check_explorer(spec, process, step, run_dir),
            timeout=spec.config.synchronizer.timeout,
            poll_s=POLL_S,
            what=f"the explorer to start step {step + gate.offset + 1} (learner step {step + 1})",
        )
    except TimeoutError as exc:
        stuck = f"the explorer process (pid {process.pid}) is stuck: {exc}"
        raise ExplorerFailed(stuck + _resume_hint(run_dir)) from None


def _check_explorer(spec: ExplorerSpec, process: Any, step: int, run_dir: Path) -> None:
    """Raise :class:`ExplorerFailed`, saying why, when the explorer process has ended."""
    if not process.is_alive():
        raise ExplorerFailed(_death(spec, process, step) + _resume_hint(run_dir)) from None


def _resume_hint(run_dir: Path) -> str:
    latest = run_dir / "checkpoints" / "latest"
    if latest.exists():
        name = latest.read_text().strip()
        return f"\ncheckpoint {name} is intact: continue with trinity train --resume {run_dir}"
    return f"\nno checkpoint was written yet: start again with --overwrite --run-dir {run_dir}"


def _death(spec: ExplorerSpec, process: Any, step: int) -> str:
    """Why the explorer process ended, for the learner's error message."""
    process.join(STOP_GRACE_S)
    where = f"the explorer process (pid {process.pid}) ended before learner step {step + 1}"
    try:
        trace: str = spec.errors.get(timeout=POLL_S)
    except queue.Empty:
        code = process.exitcode
        if code is not None and code < 0:
            return f"{where}: killed by signal {signal.Signals(-code).name}"
        # It failed before its own code ran: while starting, e.g. importing the main module (stderr says why).
        return (
            f"{where} with exit code {code} and no error report; its own message is on stderr above. "
            'A script that calls train() must guard its top level with `if __name__ == "__main__":` '
            "(the explorer process imports the script again when it starts)"
        )
    last = trace.strip().splitlines()[-1]
    return f"{where}: {last}\nthe explorer's traceback:\n{trace.rstrip()}"


def _registrations() -> list[tuple[str, str, Any, bool]]:
    """The in-process registry entries that can travel to the explorer process (picklable objects)."""
    found = []
    # A started process has none of them (it imports the modules afresh, or forks from the server).
    for record, replace in registry.get_registry().in_process():
        try:
            pickle.dumps(record.obj)
        except Exception:  # a lambda or local class stays behind; a run that names it fails there
            continue
        found.append((record.kind, record.name, record.obj, replace))
    return found
