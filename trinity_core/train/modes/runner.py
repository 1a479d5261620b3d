"""The runner: builds the explorer and the learner of a run and wires them for its ``mode``.

* ``both``: explorer step ``s`` -> buffer -> learner step ``s``; the explorer runs
  ``synchronizer.sync_offset`` steps ahead in a thread with its own copy of the weights, refreshed every
  ``synchronizer.sync_interval`` learner steps (:mod:`trinity_core.train.modes.synchronizer`). Offset 0 and
  interval 1 is lock step: nothing overlaps and the explorer samples with the learner's weights.
  With ``synchronizer.explorer_process`` that explorer is a process of its own instead of a thread, kept
  exactly ``sync_offset`` steps ahead (:mod:`trinity_core.train.modes.step_gate`).
* ``async``: the explorer in a process of its own, weights through shared memory or files
  (:mod:`trinity_core.train.modes.async_mode`).
* ``explore``: explorer steps only; their experiences go to a disk buffer (``data.experiences``,
  default ``<run_dir>/experiences``) that a later ``mode: train`` run reads.
* ``train``: learner steps only, on stored experiences (``data.experiences``).

Each step's metrics go to metrics.jsonl, trackers, ``trinity_on_metrics``; checkpoints hold learner and RNGs.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import Tensor

from trinity_core.buffer import make_buffer
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.hooks import get_plugin_manager, notify_metrics
from trinity_core.train.build import build_components, build_reference, build_rewards, build_task
from trinity_core.train.checkpoints import commit as ckpt
from trinity_core.train.checkpoints import state as checkpoint_state
from trinity_core.train.data.prompts import build_prompter
from trinity_core.train.data.stored import check_offline_trainer, check_vocabulary, load_stored_experiences
from trinity_core.train.explorer.explorer import Explored, Explorer
from trinity_core.train.learner.expert import load_expert_data
from trinity_core.train.learner.learner import Learner, check_loss_inputs
from trinity_core.train.learner.update import lr_scheduler, make_optimizer
from trinity_core.train.models.dtype import weights_dtype
from trinity_core.train.models.policy import frozen_copy, load_policy, prepare_policy
from trinity_core.train.modes.async_mode import check_explorer_process, run_async
from trinity_core.train.modes.periodic import RunOutputs
from trinity_core.train.modes.synchronizer import Synchronizer
from trinity_core.train.modes.threads import explorer_pool
from trinity_core.train.report import reporting
from trinity_core.train.report.profile import StepProfiler
from trinity_core.train.report.result import LaunchError, TrainResult

__all__ = ["LaunchError", "Runner", "TrainResult"]


class Runner:
    """One run: built from a resolved config and a run directory; :meth:`train` runs every step."""

    def __init__(
        self,
        config: ResolvedConfig,
        run_dir: Path,
        *,
        accelerator: Any,
        resume: bool = False,
        profile: bool = False,
    ) -> None:
        """Build the explorer and the learner; every problem is raised before the first step."""
        self.config, self.run_dir, self.acc = config, run_dir, accelerator
        tcfg, rcfg = config.trainer, config.rollout
        world = accelerator.num_processes
        self.rank, self.is_main = accelerator.process_index, accelerator.is_main_process
        offline = config.mode == "train"
        check_explorer_process(config, world)
        if offline:
            check_offline_trainer(config)
        elif rcfg.prompts_per_step % world:
            raise ConfigError(
                [
                    ConfigProblem(
                        "rollout.prompts_per_step",
                        f"{rcfg.prompts_per_step} prompts cannot be split over {world} processes",
                        hint=f"use a multiple of {world}",
                    )
                ]
            )

        # Task, rewards, buffer, components: cheap, so first (errors before the model loads).
        self.task = build_task(config)
        rewards = build_rewards(config, self.task)
        writer, reader = make_buffer("memory")
        self.components = build_components(config, writer, offline=offline)
        self.data = None
        if offline:
            self.data = load_stored_experiences(config, world, schema=str(self.components.preset.schema))
            if self.data.paired and tcfg.micro_batch_size is not None and tcfg.micro_batch_size % 2:
                raise ConfigError(
                    [
                        ConfigProblem(
                            "trainer.micro_batch_size",
                            f"{tcfg.micro_batch_size} rows would cut a DPO pair (two rows) in half",
                            hint="use an even micro_batch_size",
                        )
                    ]
                )
        self.total_steps = (
            self.data.total_steps(tcfg.total_steps, config.data.epochs) if self.data else tcfg.total_steps
        )
        self.pm = get_plugin_manager()

        # Seeds: the same model init on every rank, distinct sampling streams per rank.
        torch.manual_seed(tcfg.seed * 1_000_003 + self.rank)
        self.task_gen = torch.Generator().manual_seed(tcfg.seed * 7919 + self.rank)

        model, tokenizer = load_policy(
            config.model.model_path,
            config.model.tokenizer_path,
            config.model.config,
            self.task.alphabet(),
            seed=tcfg.seed,
            dtype=weights_dtype(config),  # model.dtype: a LoRA run's frozen base in bf16
        )
        prompter = build_prompter(tokenizer, config.model.chat_template, self.task)
        model = prepare_policy(model, config)  # gradient checkpointing, LoRA
        if self.data is not None:
            check_vocabulary(self.data, model)
        ref = build_reference(config, self.components.policy_loss, model)
        optimizer = make_optimizer(model, tcfg)
        scheduler = lr_scheduler(optimizer, tcfg.lr_scheduler, tcfg.warmup_steps, self.total_steps)
        accelerator.free_memory()  # what save_state writes is this trainer's: drop an earlier one's models
        model, optimizer = accelerator.prepare(model, optimizer)
        ref = ref.to(accelerator.device) if ref is not None else None
        expert = load_expert_data(config, tokenizer, self.rank)  # data.expert_path (mix, mix_chord)
        check_loss_inputs(config, self.components, ref is not None, self.data, expert)
        self.profiler = StepProfiler(profile, accelerator.device)
        self.synchronizer = Synchronizer(config.synchronizer)
        self.history: list[dict[str, float]] = []
        self.start_step = 0

        # Made after the checks, so that a check that fails leaves no loop behind; whoever runs the
        # trainer closes it (an unclosed loop collected at exit prints "Exception ignored in ... __del__").
        self.event_loop = asyncio.new_event_loop()
        self.learner = Learner(
            config,
            accelerator,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            ref=ref,
            components=self.components,
            reader=reader,
            pad_token_id=tokenizer.pad_token_id,
            data=self.data,
            profiler=self.profiler,
            event_loop=self.event_loop,
            expert=expert,
        )
        policy = self.learner.policy
        # The explorer here samples with the learner's model in lock step, with a copy when it runs in a
        # thread ahead of it; an explorer process has its own model, and this one only writes the buffer
        # and evaluates.
        own_copy = not self.synchronizer.shares_weights and self.local_explorer
        self.explorer = Explorer(
            config,
            rank=self.rank,
            prompts_per_rank=rcfg.prompts_per_step // world,
            task=self.task,
            rewards=rewards,
            tokenizer=tokenizer,
            policy=frozen_copy(policy) if own_copy else policy,
            components=self.components,
            writer=writer,
            pm=self.pm,
            task_gen=self.task_gen,
            profiler=self.profiler,
            event_loop=self.event_loop,
            prompter=prompter,
        )
        self.outputs = RunOutputs(self)  # eval_every, export_every and the model at the end
        checkpoint_state.register(accelerator, self.learner, self.task_gen, self.task)
        if resume:
            try:
                self.start_step = checkpoint_state.load_run(
                    run_dir, accelerator, self.learner, self.task_gen, self.task
                )
            except BaseException:
                self.event_loop.close()
                raise
            self.learner.version = self.start_step
            self.explorer.load_weights(Synchronizer.snapshot(policy), self.start_step)

    @property
    def local_explorer(self) -> bool:
        """Whether the explorer runs in this process (mode ``both`` without an explorer process)."""
        return self.config.mode == "both" and not self.config.synchronizer.explorer_process

    # ------------------------------------------------------------------ one lock-step step

    def step(self, step: int) -> dict[str, float]:
        """Explore, then learn, step ``step`` (0-based) in lock step; return its metrics (over ranks)."""
        metrics = self.explorer.step(step)
        metrics.update(self.learner.step(step))
        return self._finish_metrics(step, metrics, wall=math.nan, explorer_busy=0.0, learner_busy=0.0)

    # ------------------------------------------------------------------ the modes

    def train(self) -> TrainResult:
        """Run the remaining steps of the run's mode, log, checkpoint, evaluate; return the summary."""
        from tqdm import tqdm

        tcfg = self.config.trainer
        self._bar = tqdm(
            total=self.total_steps,
            initial=self.start_step,
            unit="step",
            disable=not (tcfg.progress and self.is_main),
            mininterval=0.2,
            dynamic_ncols=True,
        )
        self._log: TextIO | None = (
            (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") if self.is_main else None
        )
        self.report = reporting.RunReport(self.config, self.run_dir, self.explorer.tokenizer, self.acc)
        self.report.begin(self.start_step, self.total_steps)
        t0 = time.perf_counter()
        try:
            modes = {
                "both": self._run_both if self.local_explorer else lambda: run_async(self, ordered=True),
                "async": lambda: run_async(self),
                "explore": self._run_explore,
            }
            modes.get(self.config.mode, self._run_train)()
        finally:
            self._bar.close()
            if self._log is not None:
                self._log.close()
        return self._finish(time.perf_counter() - t0)

    def _run_both(self) -> None:
        """Explorer ``sync_offset`` steps ahead (in a thread when > 0), learner behind, weights synced."""
        explorer, learner, sync = self.explorer, self.learner, self.synchronizer
        start, total = self.start_step, self.total_steps
        pool = explorer_pool(self.config)  # with sync_offset > 0 a thread; each part its thread budget
        pending: deque[Future[Explored]] = deque(
            pool.submit(explorer.rollout, s) for s in range(start, min(start + sync.offset + 1, total))
        )
        try:
            last = time.perf_counter()
            for step in range(start, total):
                # 1. The explorer's step: its rollout (made ahead when sync_offset > 0) into the buffer.
                explored = pending.popleft().result()
                self.report.samples(step, explored.rollout, explored.rewards)
                t_write = time.perf_counter()
                metrics = explorer.write(explored)
                explorer_busy = explored.seconds + time.perf_counter() - t_write

                # 2. The learner's step on what the buffer holds.
                t_learn = time.perf_counter()
                metrics.update(learner.step(step))
                now = time.perf_counter()
                learner_busy, wall, last = now - t_learn, now - last, now
                out = self._finish_metrics(step, metrics, wall, explorer_busy, learner_busy)

                # 3. Record and checkpoint with no rollout in flight (the RNG states are then stable).
                if self._checkpoint_due(step):
                    for future in pending:
                        future.result()
                self._record(step, out, checkpoint=True)

                # 4. Weights to the explorer (queued behind its in-flight rollouts), then its next step.
                if sync.due(learner.version):
                    if sync.shares_weights:
                        explorer.version = learner.version
                    else:
                        pool.submit(explorer.load_weights, sync.snapshot(learner.policy), learner.version)
                if step + sync.offset + 1 < total:
                    pending.append(pool.submit(explorer.rollout, step + sync.offset + 1))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _run_explore(self) -> None:
        """Explorer steps only: each step's experiences move from the in-process buffer to the disk buffer."""
        where = self.config.data.experiences or str(self.run_dir / "experiences")
        disk, reader = make_buffer("disk", where).writer, self.learner.reader
        last = time.perf_counter()
        for step in range(self.start_step, self.total_steps):
            explored = self.explorer.rollout(step)
            self.report.samples(step, explored.rollout, explored.rewards)
            metrics = self.explorer.write(explored)
            exps = self.event_loop.run_until_complete(reader.read())
            self.event_loop.run_until_complete(disk.write(exps))
            self.learner.trim_buffer()
            now = time.perf_counter()
            metrics["reward/mean"] = metrics["explorer/reward_mean"]
            out = self._finish_metrics(step, metrics, now - last, now - last, 0.0)
            out["explorer/experiences"] = float(len(exps) * self.acc.num_processes)
            last = now
            self._record(step, out, checkpoint=False)

    def _run_train(self) -> None:
        """Learner steps only, on stored experiences."""
        last = time.perf_counter()
        for step in range(self.start_step, self.total_steps):
            metrics = self.learner.offline_step(step)
            now = time.perf_counter()
            out = self._finish_metrics(step, metrics, math.nan, 0.0, now - last)
            out["time/step_s"] = now - last
            out["data/epoch"] = (step + 1) / self.data.steps_per_epoch  # type: ignore[union-attr]
            last = now
            self._record(step, out, checkpoint=True)

    # ------------------------------------------------------------------ metrics, records, checkpoints

    def _finish_metrics(
        self, step: int, metrics: dict[str, Tensor], wall: float, explorer_busy: float, learner_busy: float
    ) -> dict[str, float]:
        """Reduce the step's metrics over ranks; add the learning rate, throughput and idle fractions."""
        out = self.learner.reduce(metrics)
        world = self.acc.num_processes
        experiences = out.pop("learner/experiences", math.nan) * world
        tokens = out.pop("learner/tokens", math.nan) * world
        out["lr"] = float(self.learner.scheduler.get_last_lr()[0])
        if not math.isnan(wall) and self.config.mode != "train":
            out["time/step_s"] = wall
            out["explorer/idle_fraction"] = max(0.0, 1.0 - explorer_busy / wall)
            if self.config.mode in ("both", "async"):
                out["learner/idle_fraction"] = max(0.0, 1.0 - learner_busy / wall)
                out["throughput/experiences_per_s"] = experiences / wall
                out["throughput/tokens_per_s"] = tokens / wall
        if self.profiler.enabled:
            self.profiler.totals["step"] += 0.0 if math.isnan(wall) else wall
            self.profiler.steps += 1
        out["step"] = float(step + 1)
        return out

    def _checkpoint_due(self, step: int) -> bool:
        every = self.config.trainer.checkpoint_every
        return bool(every and (step + 1) % every == 0) or step + 1 == self.total_steps

    def _record(self, step: int, out: dict[str, float], *, checkpoint: bool) -> None:
        """Log the step's metrics, checkpoint when due, tell the observers, move the progress bar."""
        out.update(self.outputs.after_step(step))
        self.history.append(out)
        if self._log is not None:
            self._log.write(json.dumps(out) + "\n")
            self._log.flush()
        self.acc.log(out, step=step + 1)
        if checkpoint and self._checkpoint_due(step):
            self.save_checkpoint(step + 1)
        notify_metrics(self.pm, step + 1, out)
        self._bar.set_postfix_str(self.report.postfix(out), refresh=False)
        self._bar.update()

    def save_checkpoint(self, step: int) -> None:
        """Write the checkpoint of ``step`` atomically (every rank writes its RNG state)."""
        keep = self.config.trainer.keep_checkpoints
        checkpoint_state.save_run(self.run_dir, step, self.acc, keep)

    # ------------------------------------------------------------------ the end of the run

    def _finish(self, wall: float) -> TrainResult:
        n = self.config.tasks.eval_size
        eval_acc = self.explorer.evaluate(self.learner.policy, n) if n and self.is_main else None
        curve = self.reward_curve()
        result = TrainResult(
            run_dir=self.run_dir,
            steps=self.total_steps,
            reward_curve=curve,
            eval_accuracy=eval_acc,
            wall_seconds=wall,
            profile=self.profiler.report() if self.profiler.enabled else None,
            final_reward=self.history[-1].get("reward/mean", math.nan) if self.history else math.nan,
            history=self.history,
            loss_curve=self.reward_curve(key="actor/loss"),
            summary=self.report.summary(self.history),
        )
        if self.is_main:
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
            ckpt.write_json_atomic(self.run_dir / "summary.json", summary)
            # A model that from_pretrained loads, next to the checkpoints (trinity export does the same
            # for any checkpoint).
            self.outputs.export()
            self.report.plot()
        self.acc.end_training()
        return result

    def reward_curve(self, points: int = 9, key: str = "reward/mean") -> list[tuple[int, float]]:
        """Mean of metric ``key`` over windows of the run's history at ``points`` evenly spaced steps.

        Empty when no step logged ``key`` (mode ``train`` on experiences without rewards).
        """
        path = self.run_dir / "metrics.jsonl"
        rows = ckpt.read_metrics(path) if self.is_main and path.exists() else self.history
        return reporting.metric_curve(rows, key, points)
