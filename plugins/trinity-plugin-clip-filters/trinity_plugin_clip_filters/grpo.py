"""GRPO scores of a trainer batch, float64, vectorized over the task groups (no host sync).

For experience ``i`` of task group ``g`` (``batch.group_index["task"]``) with sequence reward
``r_i = Σ_t rewards_it`` over its response tokens:

* ``A_i = (r_i − μ_g) / (σ_g + ε)``, ``μ_g`` the mean and ``σ_g`` the unbiased std of the group;
* ``A_i = 0`` for singleton groups (the reference uses ``r_i / (1 + ε)``) and for zero-variance groups
  (``σ_g ≤ 1e-12 · max_g |r|``; the group mean is exact for equal rewards, see ``trinity_core.ops``).

Rewards are ``batch.extras["token_level_rewards"]`` when the trainer put them there (scores after a KL
penalty), else ``batch.token_level_scores()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import torch
from torch import Tensor

from trinity_core.ops import group_stats, segment_count

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["ZERO_STD_RTOL", "grpo_scores", "sequence_rewards"]

ZERO_STD_RTOL: Final[float] = 1e-12
"""A group is zero-variance when ``σ_g ≤ ZERO_STD_RTOL · max |r|`` over the group."""


def sequence_rewards(batch: ExperienceBatch) -> Tensor:
    """``(N,)`` float64 ``Σ_t`` of the token rewards over the real response tokens."""
    tokens = batch.extras.get("token_level_rewards")
    if tokens is None:
        tokens = batch.token_level_scores()
    return torch.where(batch.response_mask.to(tokens.device), tokens.to(torch.float64), 0.0).sum(dim=-1)


def grpo_scores(rewards: Tensor, index: Tensor, num_groups: int, epsilon: float) -> Tensor:
    """``(N,)`` float64 GRPO scores (module docstring) from sequence rewards and task-group ids."""
    r = rewards.to(torch.float64)
    idx = index.to(r.device).long()
    member = segment_count(idx, num_groups)[idx] > 1
    stats = group_stats(r, idx, num_groups, valid_mask=member)
    scale = torch.zeros(num_groups, dtype=torch.float64, device=r.device).scatter_reduce(
        0, idx, torch.where(member, r.abs(), 0.0), reduce="amax"
    )
    std = stats.std_unbiased[idx]
    active = member & (std > ZERO_STD_RTOL * scale[idx])
    return torch.where(active, (r - stats.mean[idx]) / (std + epsilon), 0.0)
