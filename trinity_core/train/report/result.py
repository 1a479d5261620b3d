"""What a finished run returns (:class:`TrainResult`) and the launch mismatch (:class:`LaunchError`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SUMMARY_FILE", "LaunchError", "TrainResult"]

SUMMARY_FILE = "summary.json"
"""The summary of a finished run, in its directory; written last, so it marks a run that has ended."""


class LaunchError(RuntimeError):
    """The process layout does not match the launcher (a silently duplicated or single-process run)."""


@dataclass
class TrainResult:
    """What a finished run reports."""

    run_dir: Path
    steps: int
    reward_curve: list[tuple[int, float]]
    eval_accuracy: float | None
    wall_seconds: float
    profile: dict[str, float] | None = None
    final_reward: float = math.nan
    history: list[dict[str, float]] = field(default_factory=list)
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    """The RL figures over the last 10 steps (:func:`~trinity_core.train.report.reporting.run_summary`)."""
