"""GRPO metrics as 0-d tensors, computed without host synchronisation.

Both computation paths (per group and vectorized) report the same keys:

* ``group_advantages/reward_mean/{mean,max,min}`` and ``group_advantages/reward_std/{mean,max,min}``:
  ``μ_g`` and ``σ_g`` summarised over the groups with at least two members (0 when there are none;
  singleton groups are excluded instead of contributing the reference's placeholder 0 and 1);
* ``group_advantages/singleton_count``: experiences alone in their group (advantage 0, or dropped
  when ``std_threshold`` is set);
* ``group_advantages/batch_reward_std``: ``σ_batch``, only with ``std_cal_level="batch"``;
* ``filtered_count`` (unprefixed, as in the reference): experiences dropped by ``std_threshold``,
  singletons included.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trinity_core.components.group_metrics import GROUP_PREFIX as PREFIX
from trinity_core.components.group_metrics import group_reward_metrics

__all__ = ["PREFIX", "grpo_metrics"]


def grpo_metrics(
    group_mean: Tensor,
    group_std: Tensor,
    group_valid: Tensor,
    singleton_count: Tensor,
    filtered_count: Tensor,
    batch_std: Tensor | None = None,
) -> dict[str, Tensor]:
    """The metric dict described in the module docstring, from per-group tensors."""
    metrics = group_reward_metrics(group_mean, group_std, group_valid)
    metrics[f"{PREFIX}/singleton_count"] = singleton_count
    if batch_std is not None:
        metrics[f"{PREFIX}/batch_reward_std"] = batch_std.detach().to(torch.float64)
    metrics["filtered_count"] = filtered_count
    return metrics
