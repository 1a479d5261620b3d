"""``reward_variance`` add strategy: :class:`RewardVarianceAddStrategy`."""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from trinity_core.components import AddStrategy, ComponentArgs, Metrics
from trinity_core.experience import Experience
from trinity_plugin_polaris.groups import select_informative

__all__ = ["RewardVarianceAddStrategy", "RewardVarianceArgs"]


class RewardVarianceArgs(ComponentArgs):
    """Arguments of :class:`RewardVarianceAddStrategy` (defaults of the earlier add-strategy API)."""

    variance_threshold: float = Field(
        0.0,
        ge=0,
        description="Keep a task group only if the population variance of its rewards exceeds this value.",
    )


class RewardVarianceAddStrategy(AddStrategy):
    """Reward-variance filter: write only task groups whose reward variance exceeds a threshold.

    A pure filter (no advantages are computed): a task group is written iff it has at least two members and
    ``var_g = Σ (r_i − μ_g)² / n_g > variance_threshold`` (population variance, float64, exactly 0 for equal
    rewards; :mod:`trinity_plugin_polaris.groups`). Kept experiences go to the buffer in **one** ``write``
    call, grouped, groups in first-appearance order (the earlier strategy wrote one call per group,
    concurrently). Missing or non-finite rewards are a ``ValueError``.

    Returns ``(written, metrics)``: ``filtered_count`` (experiences dropped) and
    ``informative_group_count`` (groups written), as 0-d tensors. The earlier strategy's ``add_strategy_time``
    is left to the caller's timer.
    """

    Args: ClassVar[type[ComponentArgs]] = RewardVarianceArgs

    variance_threshold: float

    async def add(self, experiences: list[Experience], step: int) -> tuple[int, Metrics]:
        """Filter the step's experiences by group reward variance and write the kept ones."""
        if len(experiences) == 0:
            return 0, {}
        where = f"add strategy {type(self).name()!r}"
        kept, groups = select_informative(experiences, self.variance_threshold, where)
        copies = self.copies(kept, experiences)
        if kept:
            await self.writer.write(kept + (copies or []))
        metrics: Metrics = {"filtered_count": torch.tensor(len(experiences) - len(kept))}
        if copies is not None:
            metrics["duplicated_count"] = torch.tensor(len(copies))
        metrics["informative_group_count"] = groups.keep.sum()
        return len(kept) + len(copies or []), metrics

    def copies(self, kept: list[Experience], experiences: list[Experience]) -> list[Experience] | None:
        """Experiences written after the kept ones; None (this filter adds none and reports no count)."""
        return None
