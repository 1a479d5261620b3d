"""Vectorized GRPO arithmetic on flat per-experience tensors (no Python loop, no host synchronisation).

Every function takes ``(N,)`` tensors plus the group index of each experience and returns tensors on the
same device; nothing reads a tensor value on the host (no ``.item()``, no ``bool(tensor)``, no boolean
indexing), so the functions also run on the ``meta`` device, which is how the tests prove it.

Notation for one group ``g`` of ``n_g`` experiences with rewards ``r_i``:

* rank correction (``rank_penalty = p``): ``r'_i = r_i · (1 − p · k_i / n_g)`` where ``k_i`` in
  ``0 .. n_g − 1`` is the rank of the experience's masked mean log-prob inside its group (0 = lowest; ties
  keep batch order; :mod:`trinity_core.components.group_kernels`). Without a penalty ``r' = r``.
* ``μ_g = mean(r')``, ``σ_g = std_unbiased(r')`` in float64 over the experiences of groups with at least
  two members (singleton groups take part in no statistic);
* ``A_i = (r'_i − μ_g) / (σ + ε)`` with ``σ = σ_g`` (``std_cal_level="group"``) or ``σ_batch`` = the
  unbiased std of ``r'`` over every experience of a non-singleton group (``"batch"``);
* ``A_i = 0`` for singletons and for zero-variance groups (``σ_g ≤ ZERO_STD_RTOL · max_i |r'_i|``);
* with ``std_threshold = t``: keep an experience iff its group is not a singleton and ``σ_g > t``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from trinity_core.components.group_kernels import ZERO_STD_RTOL, rank_corrected_rewards
from trinity_core.ops import group_stats

__all__ = ["GRPOScores", "grpo_scores"]


@dataclass(frozen=True, eq=False)
class GRPOScores:
    """Result of :func:`grpo_scores`.

    Attributes:
        advantages: ``(N,)`` float64, one score per experience.
        keep: ``(N,)`` bool, experiences that pass ``std_threshold`` (all True without a threshold).
        group_mean: ``(G,)`` float64 ``μ_g`` (0 for singleton groups).
        group_std: ``(G,)`` float64 ``σ_g`` (0 for singleton groups).
        group_valid: ``(G,)`` bool, groups with at least two members (the ones with statistics).
        batch_std: 0-d float64 ``σ_batch`` in ``"batch"`` mode; NaN in ``"group"`` mode (not computed).
        rewards: ``(N,)`` float64 ``r'``, the rewards the statistics were computed from.
    """

    advantages: Tensor
    keep: Tensor
    group_mean: Tensor
    group_std: Tensor
    group_valid: Tensor
    batch_std: Tensor
    rewards: Tensor


def grpo_scores(
    rewards: Tensor,
    index: Tensor,
    num_groups: int,
    *,
    epsilon: float = 1e-6,
    std_threshold: float | None = None,
    rank_penalty: float | None = None,
    std_cal_level: Literal["group", "batch"] = "group",
    logprob_means: Tensor | None = None,
) -> GRPOScores:
    """GRPO scores of a whole batch at once (formulas in the module docstring).

    Args:
        rewards: ``(N,)`` finite rewards (any float dtype; computed in float64).
        index: ``(N,)`` int64 group of each experience, in ``[0, num_groups)``.
        num_groups: number of groups ``G``.
        epsilon: added to the standard deviation before dividing.
        std_threshold: drop groups with ``σ_g ≤ std_threshold`` (and singletons); None keeps all.
        rank_penalty: ``p`` of the rank correction; requires ``logprob_means``.
        std_cal_level: ``"group"`` (divide by ``σ_g``) or ``"batch"`` (divide by ``σ_batch``).
        logprob_means: ``(N,)`` masked mean log-prob per experience
            (:func:`~trinity_core.components.group_kernels.mean_logprob`).
    """
    if rank_penalty is not None:
        if logprob_means is None:
            raise ValueError("grpo_scores: rank_penalty needs logprob_means (the masked mean log-prob)")
        r = rank_corrected_rewards(rewards, index, num_groups, logprob_means, rank_penalty)
    else:
        r = rewards.to(torch.float64)
    # Statistics over every element, then singleton groups zeroed per group: a group of two or more
    # has every element a member, so its sums run over the same elements in the same order as with a
    # member mask (the same bits), without three per-element selects.
    stats = group_stats(r, index, num_groups)
    group_valid = stats.count > 1
    group_mean = torch.where(group_valid, stats.mean, 0.0)
    group_std = torch.where(group_valid, stats.std_unbiased, 0.0)
    member = group_valid.index_select(0, index)
    scale = torch.zeros(num_groups, dtype=torch.float64, device=r.device).scatter_reduce(
        0, index, r.abs(), reduce="amax"
    )
    zero_var = group_std <= ZERO_STD_RTOL * scale
    std = group_std.index_select(0, index)
    if std_cal_level == "batch":
        batch_std = group_stats(r, torch.zeros_like(index), 1, valid_mask=member).std_unbiased[0]
        sigma = batch_std
    else:  # not needed: skip the whole-batch pass
        batch_std = torch.full((), torch.nan, dtype=torch.float64, device=r.device)
        sigma = std
    scores = (r - group_mean.index_select(0, index)) / (sigma + epsilon)
    active = (group_valid & ~zero_var).index_select(0, index)
    advantages = torch.where(active, scores, 0.0)
    keep = torch.ones_like(member) if std_threshold is None else member & (std > std_threshold)
    return GRPOScores(
        advantages=advantages,
        keep=keep,
        group_mean=group_mean,
        group_std=group_std,
        group_valid=group_valid,
        batch_std=batch_std,
        rewards=r,
    )
