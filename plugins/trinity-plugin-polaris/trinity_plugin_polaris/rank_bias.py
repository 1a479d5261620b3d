"""Rank-bias-corrected GRPO scores (arXiv:2506.02355), vectorized over the groups, float64.

For experience ``i`` of a group of ``n`` members with reward ``r_i`` and masked mean log-prob
``ℓ_i = Σ_t m_t lp_t / max(Σ_t m_t, 1)`` (action tokens only):

* ``k_i`` = rank of ``ℓ_i`` in its group, ascending (0 = least likely), ties by batch order;
* ``r'_i = r_i · (1 − p · k_i / n)`` with ``p = rank_penalty``;
* ``A_i = (r'_i − μ'_g) / (σ'_g + ε)``, ``μ'``/``σ'`` the mean and unbiased std of ``r'`` in the
  group (the corrected reward is in the numerator, as in the seed's strategy; trinity-rft 0.6.0's
  GRPO ``rank_penalty`` uses the raw reward there, defect 8.1);
* ``A_i = 0`` for singletons and when ``σ'_g ≤ 1e-12 · max |r'|`` (equal corrected rewards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import torch
from torch import Tensor

from trinity_core.ops import group_stats, masked_mean, segment_count

__all__ = ["ZERO_STD_RTOL", "RankBiasScores", "group_ranks", "mean_logprob", "rank_bias_scores"]

ZERO_STD_RTOL: Final[float] = 1e-12
"""A group is zero-variance when ``σ' ≤ ZERO_STD_RTOL · max |r'|``."""


def mean_logprob(logprobs: Tensor, mask: Tensor) -> Tensor:
    """``(N,)`` float64 masked mean log-prob of each row (0 for a row without action tokens)."""
    # Sums in float64; on CPU masked_mean converts a block of rows at a time, never the whole tensor.
    return masked_mean(logprobs, mask, dim=-1, dtype=torch.float64)


def group_ranks(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """``(N,)`` int64 ascending rank of each value in its group, ties broken by position.

    Two stable sorts (by value, then by group) list the experiences group by group in rank order; the
    rank is the position in that list minus the group's first position.
    """
    order = torch.argsort(values, stable=True)
    order = order[torch.argsort(index[order], stable=True)]
    counts = segment_count(index, num_groups)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel(), device=order.device)
    return position - starts[index]


@dataclass(frozen=True, eq=False)
class RankBiasScores:
    """Result of :func:`rank_bias_scores`: ``advantages`` ``(N,)``, per group ``mean``/``std`` ``(G,)``
    of ``r'`` and ``multi`` ``(G,)`` (groups with at least two members)."""

    advantages: Tensor
    mean: Tensor
    std: Tensor
    multi: Tensor


def rank_bias_scores(
    rewards: Tensor,
    logprob_means: Tensor,
    index: Tensor,
    num_groups: int,
    rank_penalty: float,
    epsilon: float,
) -> RankBiasScores:
    """Scores of the module docstring for a whole step (no Python loop, no host sync)."""
    r = rewards.to(torch.float64)
    counts = segment_count(index, num_groups)
    sizes = counts[index].to(torch.float64)
    ranks = group_ranks(logprob_means, index, num_groups).to(torch.float64)
    corrected = r * (1.0 - rank_penalty * ranks / sizes)
    member = counts[index] > 1
    stats = group_stats(corrected, index, num_groups, valid_mask=member)
    scale = torch.zeros(num_groups, dtype=torch.float64, device=r.device).scatter_reduce(
        0, index, torch.where(member, corrected.abs(), 0.0), reduce="amax"
    )
    std = stats.std_unbiased[index]
    active = member & (std > ZERO_STD_RTOL * scale[index])
    advantages = torch.where(active, (corrected - stats.mean[index]) / (std + epsilon), 0.0)
    return RankBiasScores(advantages, stats.mean, stats.std_unbiased, counts > 1)
