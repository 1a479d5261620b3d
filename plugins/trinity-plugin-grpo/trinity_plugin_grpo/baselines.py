"""Vectorized group-baseline arithmetic of ``dr_grpo``, ``opo``, ``gpg`` and ``grpo_passk``.

Every function takes flat ``(N,)`` tensors plus the group of each experience (``index`` in
``[0, num_groups)``) and returns a :class:`GroupScores` on the same device, computed in float64 without
a Python loop and without reading a tensor on the host (no ``.item()``, no ``bool(tensor)``, no boolean
indexing), so they also run on the ``meta`` device.

Shared policies, for a group ``g`` of ``n_g`` experiences with rewards ``r_i``:

* **singleton groups** (``n_g = 1``) get advantage exactly 0 and take part in no group statistic (the
  peers use a baseline of 0 there, i.e. the raw reward as advantage);
* **zero-variance groups** (all ``r_i`` equal) get advantage exactly 0: group means and baselines are
  computed as deviations from a member's value (a pivot), so equal values give deviations of exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trinity_core.ops import group_stats, segment_count, segment_sum

__all__ = [
    "GroupScores",
    "centred_scores",
    "gpg_alpha",
    "length_weighted_scores",
    "passk_scores",
]


@dataclass(frozen=True, eq=False)
class GroupScores:
    """One score per experience plus the group statistics that the metrics report.

    Attributes:
        advantages: ``(N,)`` float64 score of each experience.
        group_mean: ``(G,)`` float64 plain mean reward ``μ_g`` of each group (0 for singletons).
        group_valid: ``(G,)`` bool, groups with at least two members.
    """

    advantages: Tensor
    group_mean: Tensor
    group_valid: Tensor


def _members(index: Tensor, num_groups: int) -> tuple[Tensor, Tensor]:
    """``(group_valid (G,), member (N,))``: groups with at least two members, and their experiences."""
    valid = segment_count(index, num_groups) > 1
    return valid, valid[index]


def centred_scores(rewards: Tensor, index: Tensor, num_groups: int) -> GroupScores:
    """Dr. GRPO: ``A_i = r_i − μ_g`` (no division by the std); 0 for singletons and equal rewards."""
    r = rewards.to(torch.float64)
    valid, member = _members(index, num_groups)
    stats = group_stats(r, index, num_groups, valid_mask=member)
    advantages = torch.where(member, r - stats.mean[index], 0.0)
    return GroupScores(advantages, stats.mean, valid)


def length_weighted_scores(rewards: Tensor, lengths: Tensor, index: Tensor, num_groups: int) -> GroupScores:
    """OPO: ``A_i = r_i − b_g`` with the length-weighted baseline ``b_g = Σ_j l_j r_j / Σ_j l_j``.

    ``l_j`` is the number of response (action) tokens of experience ``j``. A group whose lengths are all
    0 falls back to the plain mean ``μ_g``. ``b_g`` is computed as ``p_g + Σ l_j (r_j − p_g) / Σ l_j``
    with ``p_g`` the group's largest reward, so equal rewards give ``b_g = r`` exactly.
    """
    r = rewards.to(torch.float64)
    w = lengths.to(torch.float64)
    valid, member = _members(index, num_groups)
    stats = group_stats(r, index, num_groups, valid_mask=member)
    pivot = torch.zeros(num_groups, dtype=torch.float64, device=r.device).scatter_reduce(
        0, index, torch.where(member, r, -torch.inf), reduce="amax", include_self=False
    )
    pivot = torch.where(valid, pivot, 0.0)
    weight_sum = segment_sum(w, index, num_groups, valid_mask=member)
    weighted_dev = segment_sum(w * (r - pivot[index]), index, num_groups, valid_mask=member)
    has_weight = weight_sum > 0
    baseline = torch.where(
        has_weight, pivot + weighted_dev / torch.where(has_weight, weight_sum, 1.0), stats.mean
    )
    advantages = torch.where(member, r - baseline[index], 0.0)
    return GroupScores(advantages, stats.mean, valid)


def gpg_alpha(rewards: Tensor) -> Tensor:
    """GPG's batch correction ``α = N / max(#{i : r_i ≠ 0}, 1)`` as a 0-d float64 tensor."""
    r = rewards.to(torch.float64)
    nonzero = (r != 0).sum().clamp_min(1).to(torch.float64)
    return torch.as_tensor(r.shape[0], dtype=torch.float64, device=r.device) / nonzero


def passk_scores(
    rewards: Tensor, index: Tensor, num_groups: int, *, epsilon: float, normalize: bool
) -> GroupScores:
    """Pass@k: only the group's unique best experience scores, ``A = (r_max − r_second) / (σ_g + ε)``.

    ``σ_g`` is the unbiased std of the group (no division when ``normalize`` is False). When the best
    reward is shared by several members, ``r_max − r_second = 0`` and every member gets 0, so the result
    does not depend on the order of the members; every other member gets 0 too.
    """
    r = rewards.to(torch.float64)
    valid, member = _members(index, num_groups)
    stats = group_stats(r, index, num_groups, valid_mask=member)
    empty = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=r.device)
    best = empty.scatter_reduce(0, index, torch.where(member, r, -torch.inf), reduce="amax")
    is_best = member & (r == best[index])
    best_count = segment_count(index, num_groups, valid_mask=is_best)
    second = empty.scatter_reduce(0, index, torch.where(member & ~is_best, r, -torch.inf), reduce="amax")
    unique = valid & (best_count == 1)
    gap = torch.where(unique, best - torch.where(unique, second, best), 0.0)
    if normalize:
        gap = gap / (stats.std_unbiased + epsilon)
    advantages = torch.where(is_best & unique[index], gap[index], 0.0)
    return GroupScores(advantages, stats.mean, valid)
