"""Priority functions of the replay buffer (``buffer.replay.priority_fn``)."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, PriorityFn, ReplayStats

__all__ = ["LinearDecayPriority", "RewardVariancePriority"]


class LinearDecayPriority(PriorityFn):
    """p = version − decay · use_count: newer groups first, each use costing ``decay`` versions.

    Trinity-RFT's ``linear_decay`` priority (its prioritized experience buffer), with ``version`` the
    policy version that sampled the group.
    """

    class Args(ComponentArgs):
        decay: float = Field(2.0, ge=0, description="Versions of priority one use costs.")

    decay: float

    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        """``version − decay · use_count`` per group."""
        return stats.version.to(torch.float64) - self.decay * stats.use_count.to(torch.float64)


class RewardVariancePriority(PriorityFn):
    """p = var(r) − decay · use_count: groups whose rewards disagree most (the most group-relative signal)
    first."""

    class Args(ComponentArgs):
        decay: float = Field(0.0, ge=0, description="Priority one use costs.")

    decay: float

    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        """``reward_var − decay · use_count`` per group."""
        return stats.reward_var.to(torch.float64) - self.decay * stats.use_count.to(torch.float64)
