"""The runner: builds a run's parts (:mod:`~trinity_core.train.modes.parts`) and runs its ``mode``.

* ``both``: explorer step ``s`` -> buffer -> learner step ``s``; the explorer runs
  ``synchronizer.sync_offset`` steps ahead in a thread with its own copy of the weights, refreshed every
  ``synchronizer.sync_interval`` learner steps (:mod:`trinity_core.train.modes.synchronizer`). Offset 0 and
  interval 1 is lock step: nothing overlaps and the explorer samples with the learner's weights.
  With ``synchronizer.explorer_process`` that explorer is a process of its own instead of a thread, kept
  exactly ``sync_offset`` steps ahead (:mod:`trinity_core.train.modes.step_gate`).
* ``async``: the explorers in processes of their own (``synchronizer.explorers``, one per machine by
  default), weights through shared memory, files or a broadcast (:mod:`trinity_core.train.modes.async_mode`).
* ``explore``: explorer steps only; their experiences go to a disk buffer (``data.experiences``,
  default ``<run_dir>/experiences``) that a later ``mode: train`` run reads.
* ``train``: learner steps only, on stored experiences (``data.experiences``).

Each step's metrics go to metrics.jsonl, trackers, ``trinity_on_metrics``; checkpoints hold learner and RNGs.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from trinity_core.buffer import make_buffer
from trinity_core.config import ResolvedConfig
from trinity_core.hooks import get_plugin_manager
from trinity_core.train import checkpoints
from trinity_core.train.checkpoints.commit import write_json_atomic
from trinity_core.train.explorer.explorer import Explored
from trinity_core.train.explorer.inflight import load_explorer_state, save_explorer_state
from trinity_core.train.modes.async_mode import run_async
from trinity_core.train.modes.layout import Layout, check_shared_run_dir, launch_layout, uses_explorer_process
from trinity_core.train.modes.parts import (
    PolicyParts,
    RunData,
    build_explorer,
    build_learner,
    check_run,
    sampling_policy,
)
from trinity_core.train.modes.periodic import RunOutputs
from trinity_core.train.modes.recorder import StepRecorder
from trinity_core.train.modes.synchronizer import Synchronizer
from trinity_core.train.modes.threads import explorer_pool
from trinity_core.train.report import reporting
from trinity_core.train.report.profile import StepProfiler
from trinity_core.train.report.result import SUMMARY_FILE, LaunchError, TrainResult

__all__ = ["LaunchError", "Runner", "TrainResult"]


class Runner:
    """One run: built from a resolved config and a run directory; :meth:`train` runs every step.

    Its parts: :attr:`learner`, :attr:`explorer` (this process's; with an explorer process it only
    writes the buffer and evaluates), :attr:`synchronizer` (weights back to the explorer) and
    :attr:`recorder` (metrics, checkpoints, progress).
    """

    def __init__(
        self,
        config: ResolvedConfig,
        run_dir: Path,
        *,
        accelerator: Any,
        resume: bool = False,
        profile: bool = False,
    ) -> None:
        """Build the run's parts; every problem is raised before the first step."""
        self.rank, self.is_main = accelerator.process_index, accelerator.is_main_process
        config, self.layout = _place(config, run_dir, accelerator)
        self.config, self.run_dir, self.acc = config, run_dir, accelerator
        self.weight_broadcasts = 0  # taken part in (explorers on several machines, method memory)
        run_data = RunData.load(config, accelerator.num_processes)  # cheap: errors before the model loads
        self.task, self.components, self.data = run_data.task, run_data.components, run_data.stored
        self.total_steps = run_data.total_steps(config)
        self.pm = get_plugin_manager()
        # Seeds: the same model init on every rank, distinct sampling streams per rank.
        torch.manual_seed(config.trainer.seed * 1_000_003 + self.rank)
        self.task_gen = torch.Generator().manual_seed(config.trainer.seed * 7919 + self.rank)
        policy = PolicyParts.load(config, accelerator, run_data, self.total_steps)
        self.profiler = StepProfiler(profile, accelerator.device)
        self.synchronizer = Synchronizer(config.synchronizer)
        # Made after the checks, so that a check that fails leaves no loop behind; whoever runs the
        # trainer closes it (an unclosed loop collected at exit prints "Exception ignored in ... __del__").
        self.event_loop = asyncio.new_event_loop()
        self.learner = build_learner(config, accelerator, run_data, policy, self.profiler, self.event_loop)
        # A thread ahead of the learner samples with its own copy; an explorer process has its own model.
        own_copy = not self.synchronizer.shares_weights and self.local_explorer
        self.explorer = build_explorer(
            config,
            accelerator,
            run_data,
            policy,
            sampling_policy(self.learner, own_copy),
            pm=self.pm,
            task_gen=self.task_gen,
            profiler=self.profiler,
            event_loop=self.event_loop,
        )
        self.outputs = RunOutputs(self)  # eval_every, export_every and the model at the end
        self.recorder = StepRecorder(
            config,
            run_dir,
            accelerator,
            learner=self.learner,
            outputs=self.outputs,
            profiler=self.profiler,
            pm=self.pm,
            total_steps=self.total_steps,
        )
        self.start_step = 0
        self._pending: deque[Future[Explored]] = deque()
        self._restored: list[Explored] | None = None
        if self.local_explorer and self.synchronizer.offset > 0:
            self.recorder.extra_state = self._save_explorer_state
        checkpoints.register(accelerator, self.learner, self.task_gen, self.task)
        if resume:
            self._resume()

    def _resume(self) -> None:
        """Load the run's newest intact checkpoint: the learner, RNGs and task stream, then the explorer's
        weights."""
        try:
            self.start_step, path = checkpoints.load_run_from(
                self.run_dir, self.acc, self.learner, self.task_gen, self.task
            )
        except BaseException:
            self.event_loop.close()
            raise
        self.learner.version = self.start_step
        saved = load_explorer_state(path, self.rank) if self.recorder.extra_state is not None else None
        if saved is None:  # lock step: the explorer samples with the learner's weights
            self.explorer.load_weights(Synchronizer.snapshot(self.learner.policy), self.start_step)
            return
        # Ahead of the learner: the rollouts it had made and the weights it had (see explorer/inflight.py).
        self._restored, weights, version = saved
        self.explorer.load_weights(weights, version)

    def _save_explorer_state(self, directory: Path) -> None:
        """Keep the explorer's rollouts made ahead (all finished at a checkpoint) and its weights."""
        explored = [future.result() for future in self._pending]
        weights = Synchronizer.snapshot(self.explorer.policy)
        save_explorer_state(directory, self.rank, explored, weights, self.explorer.version)

    @property
    def local_explorer(self) -> bool:
        """Whether the explorer runs in this process (mode ``both`` without an explorer process)."""
        return self.config.mode == "both" and not self.config.synchronizer.explorer_process

    @property
    def history(self) -> list[dict[str, float]]:
        """The metrics of the steps run so far (as logged)."""
        return self.recorder.history

    def save_checkpoint(self, step: int) -> None:
        """Write the checkpoint of ``step`` now (see :meth:`StepRecorder.save_checkpoint`)."""
        self.recorder.save_checkpoint(step)

    # ------------------------------------------------------------------ one lock-step step

    def step(self, step: int) -> dict[str, float]:
        """Explore, then learn, step ``step`` (0-based) in lock step; return its metrics (over ranks)."""
        metrics = self.explorer.step(step)
        metrics.update(self.learner.step(step))
        return self.recorder.finish(step, metrics, wall=math.nan, explorer_busy=0.0, learner_busy=0.0)

    # ------------------------------------------------------------------ the modes

    def train(self) -> TrainResult:
        """Run the remaining steps of the run's mode, log, checkpoint, evaluate; return the summary."""
        self.report = self.recorder.open(self.start_step, self.explorer.tokenizer)
        t0 = time.perf_counter()
        try:
            modes = {
                "both": self._run_both if self.local_explorer else lambda: run_async(self, ordered=True),
                "async": lambda: run_async(self),
                "explore": self._run_explore,
            }
            modes.get(self.config.mode, self._run_train)()
        finally:
            self.recorder.close()
        return self._finish(time.perf_counter() - t0)

    def _run_both(self) -> None:
        """Explorer ``sync_offset`` steps ahead (in a thread when > 0), learner behind, weights synced."""
        explorer, learner = self.explorer, self.learner
        start, total = self.start_step, self.total_steps
        pool = explorer_pool(self.config)  # with sync_offset > 0 a thread; each part its thread budget
        pending = self._pending = self._first_rollouts(pool)
        try:
            last = time.perf_counter()
            for step in range(start, total):
                # 1. The explorer's step: its rollout (made ahead when sync_offset > 0) into the buffer.
                explored = pending.popleft().result()
                self.report.samples(step, explored.rollout, explored.rewards, explored.experiences)
                t_write = time.perf_counter()
                metrics = explorer.write(explored)
                explorer_busy = explored.seconds + time.perf_counter() - t_write

                # 2. The learner's step on what the buffer holds.
                t_learn = time.perf_counter()
                metrics.update(learner.step(step))
                now = time.perf_counter()
                learner_busy, wall, last = now - t_learn, now - last, now
                out = self.recorder.finish(step, metrics, wall, explorer_busy, learner_busy)

                # 3. Record and checkpoint with no rollout in flight (the RNG states are then stable).
                if self.recorder.checkpoint_due(step):
                    for future in pending:
                        future.result()
                self.recorder.record(step, out, checkpoint=True)

                # 4. Weights to the explorer (queued behind its in-flight rollouts), then its next step.
                self._sync_and_submit(pool, step)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _first_rollouts(self, pool: Any) -> deque[Future[Explored]]:
        """The rollouts in flight as the first step starts: the first ``sync_offset + 1`` steps' (submitted
        now), or, resumed from a run ahead of its learner, the rollouts its checkpoint kept, followed by
        what the uninterrupted run did after that checkpoint (its weight sync, its next rollout)."""
        start, total, offset = self.start_step, self.total_steps, self.synchronizer.offset
        if self._restored is None:
            return deque(
                pool.submit(self.explorer.rollout, s) for s in range(start, min(start + offset + 1, total))
            )
        pending: deque[Future[Explored]] = deque()
        for explored in self._restored:
            done: Future[Explored] = Future()
            done.set_result(explored)
            pending.append(done)
        self._pending, self._restored = pending, None
        self._sync_and_submit(pool, start - 1)
        return pending

    def _sync_and_submit(self, pool: Any, step: int) -> None:
        """After step ``step``: the learner's weights to the explorer when due (queued behind its rollouts
        in flight), then the rollout ``sync_offset + 1`` steps on."""
        explorer, learner, sync = self.explorer, self.learner, self.synchronizer
        if sync.due(learner.version):
            if sync.shares_weights:
                explorer.version = learner.version
            else:
                pool.submit(explorer.load_weights, sync.snapshot(learner.policy), learner.version)
        if step + sync.offset + 1 < self.total_steps:
            self._pending.append(pool.submit(explorer.rollout, step + sync.offset + 1))

    def _run_explore(self) -> None:
        """Explorer steps only: each step's experiences move from the in-process buffer to the disk buffer."""
        where = self.config.data.experiences or str(self.run_dir / "experiences")
        disk, reader = make_buffer("disk", where).writer, self.learner.reader
        last = time.perf_counter()
        for step in range(self.start_step, self.total_steps):
            explored = self.explorer.rollout(step)
            self.report.samples(step, explored.rollout, explored.rewards, explored.experiences)
            metrics = self.explorer.write(explored)
            exps = self.event_loop.run_until_complete(reader.read())
            self.event_loop.run_until_complete(disk.write(exps))
            self.learner.trim_buffer()
            now = time.perf_counter()
            metrics["reward/mean"] = metrics["explorer/reward_mean"]
            out = self.recorder.finish(step, metrics, now - last, now - last, 0.0)
            out["explorer/experiences"] = float(len(exps) * self.acc.num_processes)
            last = now
            self.recorder.record(step, out, checkpoint=False)

    def _run_train(self) -> None:
        """Learner steps only, on stored experiences."""
        last = time.perf_counter()
        for step in range(self.start_step, self.total_steps):
            metrics = self.learner.offline_step(step)
            now = time.perf_counter()
            out = self.recorder.finish(step, metrics, math.nan, 0.0, now - last)
            out["time/step_s"] = now - last
            out["data/epoch"] = (step + 1) / self.data.steps_per_epoch  # type: ignore[union-attr]
            last = now
            self.recorder.record(step, out, checkpoint=True)

    # ------------------------------------------------------------------ the end of the run

    def _finish(self, wall: float) -> TrainResult:
        """The end of the run: the held-out evaluation, the result, and (main process) the model folder,
        ``plot.png`` and, last, ``summary.json`` (a run without it has not ended: ``--resume`` ends it)."""
        n = self.config.tasks.eval_size
        eval_acc = self.explorer.evaluate(self.learner.policy, n) if n and self.is_main else None
        curve = self.reward_curve()
        # A resumed run with no step left logged nothing now: its figures are those logged before.
        rows = self.history or self._logged_rows()
        result = TrainResult(
            run_dir=self.run_dir,
            steps=self.total_steps,
            reward_curve=curve,
            eval_accuracy=eval_acc,
            wall_seconds=wall,
            profile=self.profiler.report() if self.profiler.enabled else None,
            final_reward=rows[-1].get("reward/mean", math.nan) if rows else math.nan,
            history=self.history,
            loss_curve=self.reward_curve(key="actor/loss"),
            summary=self.report.summary(rows),
        )
        if self.is_main:
            # A model that from_pretrained loads, next to the checkpoints (trinity export does the same
            # for any checkpoint).
            self.outputs.export()
            self.report.plot()
            summary = {
                "mode": self.config.mode,
                "steps": result.steps,
                "wall_seconds": wall,
                "reward_curve": curve,
                "loss_curve": result.loss_curve,
                "eval_greedy_accuracy": eval_acc,
                "profile": result.profile,
                "last_steps": result.summary,
            }
            write_json_atomic(self.run_dir / SUMMARY_FILE, summary)
        self.acc.end_training()
        return result

    def _logged_rows(self) -> list[dict[str, float]]:
        """The rows of ``metrics.jsonl`` (main process; empty elsewhere or without the file)."""
        path = self.run_dir / "metrics.jsonl"
        return checkpoints.read_metrics(path) if self.is_main and path.exists() else []

    def reward_curve(self, points: int = 9, key: str = "reward/mean") -> list[tuple[int, float]]:
        """Mean of metric ``key`` over windows of the run's history at ``points`` evenly spaced steps.

        Empty when no step logged ``key`` (mode ``train`` on experiences without rewards).
        """
        rows = self._logged_rows() if self.is_main else self.history
        return reporting.metric_curve(rows or self.history, key, points)


def _place(config: ResolvedConfig, run_dir: Path, accelerator: Any) -> tuple[ResolvedConfig, Layout]:
    """The launch's layout, checked against the mode (and, ``method: checkpoint`` on several machines, the
    run directory every machine must see); the config with the run's ``synchronizer.explorers``, which
    config.yaml keeps so that ``--resume`` has the same explorers."""
    layout = launch_layout(config, accelerator.process_index, accelerator.num_processes, os.environ)
    check_run(config, layout, accelerator.device)
    check_shared_run_dir(config, layout, run_dir, accelerator)
    sync = config.synchronizer
    if sync.explorers is None and uses_explorer_process(config):
        sync = sync.model_copy(update={"explorers": layout.explorers})
        config = config.model_copy(update={"synchronizer": sync})
    return config, layout
