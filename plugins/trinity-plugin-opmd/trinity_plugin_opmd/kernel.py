"""Vectorized OPMD / AsymRE baselines over task groups (float64, no Python loop, no host sync).

For a group ``g`` of rewards ``r_1..r_n``:

* ``mean``: ``b_g = (1/n) Σ r_i`` (exact for equal rewards: :func:`trinity_core.ops.group_stats`);
* ``logavgexp``: ``b_g = τ · log((1/n) Σ exp(r_i / τ))``, evaluated as
  ``M + τ · log((1/n) Σ exp((r_i − M)/τ))`` with ``M = max_i r_i`` so it never overflows and equal rewards
  give exactly ``M``. It lies between the mean (``τ → ∞``) and the maximum (``τ → 0``).

The advantage is ``A_i = r_i − b_{g(i)}``. A group of one has ``b = r`` under both baselines, so its
advantage is 0; a zero-variance group gets exactly 0 too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from trinity_core.ops import group_stats, segment_count, segment_mean

__all__ = ["GroupBaselines", "group_baselines", "logavgexp"]

Baseline = Literal["mean", "logavgexp"]


def logavgexp(values: Tensor, index: Tensor, num_groups: int, tau: float) -> Tensor:
    """``τ · log(mean_g exp(v / τ))`` per group ``(num_groups,)`` float64 (0 for an empty group)."""
    v = values.to(torch.float64)
    pivot = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=v.device)
    pivot = pivot.scatter_reduce(0, index, v, reduce="amax")
    present = segment_count(index, num_groups) > 0
    pivot = torch.where(present, pivot, 0.0)
    scaled = torch.exp((v - pivot[index]) / tau)
    return pivot + tau * torch.log(torch.where(present, segment_mean(scaled, index, num_groups), 1.0))


@dataclass(frozen=True, eq=False)
class GroupBaselines:
    """Per-group ``(G,)`` tensors: the unshifted baseline ``center``, ``reward_mean`` (float64), ``count``
    (int64), and the constant ``shift`` (AsymRE's ``baseline_shift``; 0 for OPMD)."""

    center: Tensor
    reward_mean: Tensor
    count: Tensor
    shift: float = 0.0

    @property
    def baseline(self) -> Tensor:
        """``b_g = center_g + shift``, the baseline each member's reward is compared with."""
        return self.center + self.shift

    def advantages(self, rewards: Tensor, index: Tensor) -> Tensor:
        """``A_i = (r_i − center_g) − shift`` ``(N,)`` float64; equal rewards give exactly ``−shift``."""
        return (rewards.to(torch.float64) - self.center[index]) - self.shift


def group_baselines(
    rewards: Tensor, index: Tensor, num_groups: int, baseline: Baseline, tau: float = 1.0, shift: float = 0.0
) -> GroupBaselines:
    """Baselines of every group (module docstring), shifted by ``shift``."""
    stats = group_stats(rewards, index, num_groups)
    center = stats.mean if baseline == "mean" else logavgexp(rewards, index, num_groups, tau)
    return GroupBaselines(center=center, reward_mean=stats.mean, count=stats.count, shift=shift)
