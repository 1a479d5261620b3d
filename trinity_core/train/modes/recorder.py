"""After each step, in every mode: the step's metrics finished and recorded, the checkpoint when due.

:meth:`StepRecorder.finish` reduces the step's metrics over ranks once and adds the learning rate, the
step time, throughput and the idle fractions; :meth:`StepRecorder.record` runs the periodic evaluation
and export, appends the row to ``metrics.jsonl`` and the trackers, commits the checkpoint when due, tells
the ``trinity_on_metrics`` observers, and moves the progress bar.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import Tensor

from trinity_core.config import ResolvedConfig
from trinity_core.hooks import notify_metrics
from trinity_core.train import checkpoints
from trinity_core.train.checkpoints.commit import CheckpointError
from trinity_core.train.learner.learner import Learner
from trinity_core.train.modes.periodic import RunOutputs
from trinity_core.train.report.profile import StepProfiler
from trinity_core.train.report.reporting import RunReport

__all__ = ["StepRecorder", "non_finite_tensors"]


def non_finite_tensors(model: Any) -> list[str]:
    """Names of the parameters and buffers of ``model`` with a NaN or infinite element (one host read)."""
    named = [*model.named_parameters(), *model.named_buffers()]
    floating = [(name, value) for name, value in named if value.is_floating_point()]
    if not floating:
        return []
    finite = torch.stack([torch.isfinite(value).all() for _, value in floating]).tolist()
    return [name for (name, _), ok in zip(floating, finite, strict=True) if not ok]


class StepRecorder:
    """Finishes and records the steps of one run.

    Args:
        config: the run's config (mode, ``trainer`` checkpoint and progress settings).
        run_dir: the run directory (``metrics.jsonl``, checkpoints).
        accelerator: the run's ``Accelerator`` (trackers, rank, checkpoints).
        learner: reduces the metrics over ranks; its schedule gives the learning rate.
        outputs: the periodic evaluation and export.
        profiler: the step timings of ``--profile``.
        pm: the plugin manager (``trinity_on_metrics``).
        total_steps: the run's last step (always checkpointed).
    """

    def __init__(
        self,
        config: ResolvedConfig,
        run_dir: Path,
        accelerator: Any,
        *,
        learner: Learner,
        outputs: RunOutputs,
        profiler: StepProfiler,
        pm: Any,
        total_steps: int,
    ) -> None:
        """Hold the parts; :meth:`open` starts the log and the bar."""
        self.config, self.run_dir, self.acc = config, run_dir, accelerator
        self.learner, self.outputs, self.profiler, self.pm = learner, outputs, profiler, pm
        self.total_steps = total_steps
        self.history: list[dict[str, float]] = []
        self._log: TextIO | None = None
        self._bar: Any = None
        self.report: RunReport | None = None
        self.extra_state: Callable[[Path], None] | None = None
        """Writes more of the run's state into each checkpoint (the explorer's, when it runs ahead)."""

    def open(self, start_step: int, tokenizer: Any) -> RunReport:
        """Open ``metrics.jsonl`` (main process), the progress bar and the run's report."""
        from tqdm import tqdm

        tcfg, is_main = self.config.trainer, self.acc.is_main_process
        self._bar = tqdm(
            total=self.total_steps,
            initial=start_step,
            unit="step",
            disable=not (tcfg.progress and is_main),
            mininterval=0.2,
            dynamic_ncols=True,
        )
        self._log = (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") if is_main else None
        self.report = RunReport(self.config, self.run_dir, tokenizer, self.acc)
        self.report.begin(start_step, self.total_steps)
        return self.report

    def close(self) -> None:
        """Close the bar and the log."""
        if self._bar is not None:
            self._bar.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def finish(
        self, step: int, metrics: dict[str, Tensor], wall: float, explorer_busy: float, learner_busy: float
    ) -> dict[str, float]:
        """Reduce the step's metrics over ranks; add the learning rate, throughput and idle fractions."""
        out = self.learner.reduce(metrics, step)
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

    def checkpoint_due(self, step: int) -> bool:
        """Whether 0-based step ``step`` ends with a checkpoint (``trainer.checkpoint_every``, the last)."""
        every = self.config.trainer.checkpoint_every
        return bool(every and (step + 1) % every == 0) or step + 1 == self.total_steps

    def record(self, step: int, out: dict[str, float], *, checkpoint: bool) -> None:
        """Log the step's metrics, checkpoint when due, tell the observers, move the progress bar."""
        out.update(self.outputs.after_step(step))
        self.history.append(out)
        if self._log is not None:
            self._log.write(json.dumps(out) + "\n")
            self._log.flush()
        self.acc.log(out, step=step + 1)
        if checkpoint and self.checkpoint_due(step):
            self.save_checkpoint(step + 1)
        notify_metrics(self.pm, step + 1, out)
        if self._bar is not None:
            assert self.report is not None
            self._bar.set_postfix_str(self.report.postfix(out), refresh=False)
            self._bar.update()

    def save_checkpoint(self, step: int) -> None:
        """Write the checkpoint of ``step`` atomically (every rank writes its RNG state).

        Raises:
            CheckpointError: the policy (or critic) has non-finite weights; nothing is written, so the
                last checkpoint stays the one a resume starts from.
        """
        models = [("policy", self.learner.policy)]
        if self.learner.critic is not None:
            models.append(("critic", self.learner.critic.module))
        for role, model in models:
            bad = non_finite_tensors(model)
            if bad:
                raise CheckpointError(
                    f"step {step}: the {role} has {len(bad)} non-finite weight tensor(s) "
                    f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}); not checkpointed. "
                    f"{self._last_good()}; lower trainer.lr or set trainer.grad_clip, then resume"
                )
        keep = self.config.trainer.keep_checkpoints
        checkpoints.save_run(self.run_dir, step, self.acc, keep, extra=self.extra_state)

    def _last_good(self) -> str:
        """Where a resume of this run starts, in words."""
        try:
            path = checkpoints.latest_checkpoint(self.run_dir, warn=lambda message: None)
        except CheckpointError:
            path = None
        if path is None:
            return "No checkpoint was written before it"
        return f"The last good checkpoint is {path.name} (trinity train --resume {self.run_dir})"
