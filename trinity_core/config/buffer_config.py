"""Config of the buffer pillar: task sets in a mixture (``tasks.mix``), the experience pipeline's operators
(``rollout.experience_pipeline``) and the replay buffer (``buffer.replay``). See docs/buffer.md."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from pydantic import Field, field_validator, model_validator

from trinity_core.config.base import Section

__all__ = ["BufferConfig", "OperatorEntry", "ReplayConfig", "TaskSetEntry", "WeightSchedule"]

WeightSchedule = float | list[tuple[int, float]]
"""A task set's mixing weight: a number, or ``[[step, weight], ...]`` points (steps increasing) that the
weight follows linearly between, constant before the first and after the last."""


class TaskSetEntry(Section):
    """One task set of a mixture (``tasks.mix`` or ``tasks: [...]``)."""

    name: str = Field(description="Registered task set (kind task).")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the task set.")
    weight: WeightSchedule = Field(
        default=1.0,
        description="Share of each step's prompts: a number, or [[step, weight], ...] for a curriculum "
        "(linear between the points). Weights are normalised over the mixture at every step.",
    )
    pool_size: int | None = Field(
        default=None,
        ge=1,
        description="For a task set that draws fresh rows every step (the synthetic ones): draw this many "
        "rows once and select among them; needed by every selector but shuffle.",
    )
    selector: str | None = Field(default=None, description="Task selector; unset: tasks.selector.")
    selector_args: dict[str, Any] | None = Field(
        default=None, description="Arguments of the selector; unset: tasks.selector_args."
    )
    eval: bool = Field(default=True, description="Whether the held-out evaluation includes this task set.")
    label: str | None = Field(
        default=None, description="Name in metrics (buffer/taskset/<label>/...); unset: the task set's name."
    )

    @field_validator("weight")
    @classmethod
    def _weight(cls, value: WeightSchedule) -> WeightSchedule:
        """Non-negative weights; a schedule's steps non-negative and increasing."""
        if isinstance(value, float | int):
            if value < 0:
                raise ValueError(f"a weight must be >= 0, got {value}")
            return float(value)
        if not value:
            raise ValueError("a weight schedule needs at least one [step, weight] point")
        steps = [s for s, _ in value]
        if any(s < 0 for s in steps) or any(b <= a for a, b in pairwise(steps)):
            raise ValueError(f"schedule steps must be >= 0 and increasing, got {steps}")
        if any(w < 0 for _, w in value):
            raise ValueError(f"weights must be >= 0, got {[w for _, w in value]}")
        return [(int(s), float(w)) for s, w in value]


class OperatorEntry(Section):
    """One experience operator of ``rollout.experience_pipeline``."""

    name: str = Field(description="Registered experience operator (kind experience_operator).")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the operator.")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        """A bare name is an operator with default arguments."""
        return {"name": value} if isinstance(value, str) else value


class ReplayConfig(Section):
    """Experience replay: task groups trained on are kept and mixed into later steps' batches."""

    priority_fn: str = Field(default="fifo", description="Which stored groups go first (kind priority_fn).")
    priority_fn_args: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")
    groups_per_step: int = Field(
        default=1, ge=0, description="Stored task groups added to each step's fresh batch (every rank)."
    )
    capacity: int = Field(
        default=256, ge=1, description="Groups kept per rank; past it the lowest priority is evicted."
    )
    max_reuse: int = Field(
        default=2,
        ge=1,
        description="Times a group is trained on in all, its fresh use included (1: never replayed).",
    )
    max_staleness: int | None = Field(
        default=None,
        ge=0,
        description="Groups sampled more than this many policy versions ago are evicted; unset: kept.",
    )


class BufferConfig(Section):
    """Between the explorer and the learner: replay (off by default)."""

    replay: ReplayConfig | None = Field(
        default=None, description="Experience replay (modes both and async); unset: every experience once."
    )
