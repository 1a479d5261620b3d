"""Rank-bias-corrected GRPO scores (arXiv:2506.02355), vectorized over the groups, float64.

For experience ``i`` of a group of ``n`` members with reward ``r_i`` and masked mean log-prob
``ℓ_i = Σ_t m_t lp_t / max(Σ_t m_t, 1)`` (action tokens only):

* ``k_i`` = rank of ``ℓ_i`` in its group, ascending (0 = least likely), ties by batch order
  (:mod:`trinity_core.components.group_kernels`);
* ``r'_i = r_i · (1 − p · k_i / n)`` with ``p = rank_penalty``;
* ``A_i = (r'_i − μ'_g) / (σ'_g + ε)``, ``μ'``/``σ'`` the mean and unbiased std of ``r'`` in the
  group (the corrected reward is in the numerator; trinity-rft 0.6.0's GRPO ``rank_penalty`` uses the
  raw reward there, see docs/reference-differences.md);
* ``A_i = 0`` for singletons and when ``σ'_g ≤ 1e-12 · max |r'|`` (equal corrected rewards).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trinity_core.components.group_kernels import ZERO_STD_RTOL, rank_corrected_rewards
from trinity_core.ops import group_stats, segment_count

__all__ = ["RankBiasScores", "rank_bias_scores"]


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
    corrected = rank_corrected_rewards(r, index, num_groups, logprob_means, rank_penalty)
    member = counts[index] > 1
    stats = group_stats(corrected, index, num_groups, valid_mask=member)
    scale = torch.zeros(num_groups, dtype=torch.float64, device=r.device).scatter_reduce(
        0, index, torch.where(member, corrected.abs(), 0.0), reduce="amax"
    )
    std = stats.std_unbiased[index]
    active = member & (std > ZERO_STD_RTOL * scale[index])
    advantages = torch.where(active, (corrected - stats.mean[index]) / (std + epsilon), 0.0)
    return RankBiasScores(advantages, stats.mean, stats.std_unbiased, counts > 1)
