"""What a run writes besides checkpoints: ``trainer.eval_every``'s figures and the model folder.

Every ``trainer.export_every`` steps and at the end, the policy goes to ``<run_dir>/model`` with
``save_pretrained`` (replaced only when the new folder is complete); every ``trainer.eval_every`` steps
the held-out figures of :mod:`trinity_core.train.explorer.evaluation` join the step's metrics (``eval/...``).
Both happen on the main process only; mode ``train`` (stored experiences, no rollouts) is not
evaluated. Evaluation samples from its own seeded generator state, so a run in lock step trains exactly
as without ``eval_every``; with ``synchronizer.sync_offset > 0`` the explorer's thread may sample while
the evaluation runs, and its draws then differ (the run is as valid, not bit-identical).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity_core.train.explorer.evaluation import EvalSettings
from trinity_core.train.export import save_policy

__all__ = ["RunOutputs"]


class RunOutputs:
    """The periodic evaluation and export of one run.

    Args:
        runner: the run's :class:`~trinity_core.train.modes.runner.Runner`: its config, run directory,
            accelerator (unwraps the policy for ``save_pretrained``), learner (the policy), explorer
            (tokenizer, prompts, rewards) and last step (the end of the run exports, not this).
    """

    def __init__(self, runner: Any) -> None:
        """Hold the run's parts; nothing is written here."""
        self.config, self.run_dir, self.acc = runner.config, runner.run_dir, runner.acc
        self.learner, self.explorer, self.total_steps = runner.learner, runner.explorer, runner.total_steps

    def after_step(self, step: int) -> dict[str, float]:
        """Export and evaluate when due after step ``step`` (0-based); the evaluation's figures."""
        tcfg, done = self.config.trainer, step + 1
        if not self.acc.is_main_process:
            return {}
        if tcfg.export_every and done % tcfg.export_every == 0 and done < self.total_steps:
            self.export()
        if self.config.mode == "train" or not (tcfg.eval_every and done % tcfg.eval_every == 0):
            return {}
        settings = EvalSettings.from_config(self.config, self.explorer.max_new_tokens)
        figures = self.explorer.evaluate_all(self.learner.policy, settings)
        return {k: v for k, v in figures.items() if v is not None}

    def export(self) -> Path:
        """``save_pretrained`` of the learner's policy, tokenizer and generation config into
        ``<run_dir>/model``."""
        return save_policy(
            self.acc.unwrap_model(self.learner.policy),
            self.explorer.tokenizer,
            self.run_dir / "model",
            max_new_tokens=self.explorer.max_new_tokens,
            overwrite=True,
        )
