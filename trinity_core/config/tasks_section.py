"""The ``tasks`` section: the task set (or a mixture of them), how its rows are selected, its reward
functions and its held-out evaluation."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trinity_core.config.base import Section
from trinity_core.config.buffer_config import TaskSetEntry

__all__ = ["TasksConfig"]


class TasksConfig(Section):
    """The task set and its reward functions."""

    name: str | None = Field(
        default=None,
        description="Registered task set (kind task); unset: last_digit.",
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the task set.")
    reward_fns: list[str] | None = Field(
        default=None,
        description="Reward functions (kind reward_fn), weighted-summed; unset: the task's default.",
    )
    reward_weights: list[float] | None = Field(
        default=None, description="One weight per reward function (finite, may be negative); unset: all 1."
    )
    reward_fn_args: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Keyword arguments per reward function name."
    )
    eval_size: int = Field(default=100, ge=0, description="Held-out prompts for the final greedy accuracy.")
    eval_k: int = Field(
        default=4,
        ge=0,
        description="Samples per held-out prompt (rollout.temperature) for eval pass@k; 0: greedy only "
        "(no samples, no pass@k figures).",
    )
    eval_success: float = Field(
        default=1.0,
        description="A response whose combined reward is at least this counts as solved (pass@k, "
        "the buffer/pass_rate metrics).",
    )
    selector: str = Field(
        default="shuffle", description="Task selector: which rows each step samples (kind task_selector)."
    )
    selector_args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the selector.")
    pool_size: int | None = Field(
        default=None,
        ge=1,
        description="For a task set that draws fresh rows every step: draw this many rows once and select "
        "among them (every selector but shuffle needs rows to choose among).",
    )
    mix: list[TaskSetEntry] | None = Field(
        default=None,
        description="Several task sets mixed by weight (instead of name/args); also written tasks: [...].",
    )

    @property
    def label(self) -> str:
        """The task set's name, or the mixture's names joined with ``+`` (run names, plot titles)."""
        return "+".join(e.label or e.name for e in self.mix) if self.mix else self.name or "last_digit"
