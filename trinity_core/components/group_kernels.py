"""Vectorized pieces shared by group-relative advantages: ranks inside a group and the rank correction.

Every function takes flat ``(N,)`` tensors plus the group index of each experience and returns tensors
on the same device. Nothing reads a tensor value on the host, so the functions also run on the ``meta``
device.

* :data:`ZERO_STD_RTOL`: a group whose rewards differ only by float64 noise counts as zero-variance;
* :func:`group_ranks`: the rank of each value inside its group (ties broken by batch position);
* :func:`mean_logprob` and :func:`rank_corrected_rewards`: the unlikeliness correction of He et al.
  (arXiv:2506.02355), ``r'_i = r_i · (1 − p · k_i / n_g)`` with ``k_i`` the rank of the experience's
  masked mean log-prob in its group (0 = least likely).
"""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

from trinity_core.ops import masked_mean, segment_count

__all__ = ["ZERO_STD_RTOL", "group_ranks", "mean_logprob", "rank_corrected_rewards"]

ZERO_STD_RTOL: Final[float] = 1e-12
"""A group is zero-variance when ``σ_g ≤ ZERO_STD_RTOL · max |r|`` over the group (float64 noise)."""


def group_ranks(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """Rank ``(N,)`` int64 of each value inside its group, ascending, ties broken by position.

    ``k_i = #{j in group(i) : v_j < v_i or (v_j == v_i and j < i)}``: two stable sorts (by value, then by
    group) list the experiences group by group in rank order; the rank is the position in that list minus
    the group's first position.
    """
    order = torch.argsort(values, stable=True)
    order = order[torch.argsort(index[order], stable=True)]
    counts = segment_count(index, num_groups)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(order)
    position[order] = torch.arange(values.shape[0], device=values.device)
    return position - starts[index]


def mean_logprob(logprobs: Tensor, mask: Tensor) -> Tensor:
    """Masked mean log-prob per row ``(N,)`` float64: ``Σ_t m·lp / max(Σ_t m, 1)`` (0 for empty rows)."""
    return masked_mean(logprobs, mask, dim=-1, dtype=torch.float64)


def rank_corrected_rewards(
    rewards: Tensor, index: Tensor, num_groups: int, logprob_means: Tensor, rank_penalty: float
) -> Tensor:
    """``r'_i = r_i · (1 − p · k_i / n_g)`` in float64, ``k_i`` the rank of ``logprob_means`` in the group."""
    sizes = segment_count(index, num_groups)[index].to(torch.float64)
    ranks = group_ranks(logprob_means, index, num_groups).to(torch.float64)
    return rewards.to(torch.float64) * (1.0 - rank_penalty * ranks / sizes)
