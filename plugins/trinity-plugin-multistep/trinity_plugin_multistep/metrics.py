"""Step-wise GRPO metrics as 0-d tensors, identical on both paths (no host synchronisation).

* ``group_advantages/reward_mean/{mean,max,min}``, ``group_advantages/reward_std/{mean,max,min}``: ``μ_g``
  and ``σ_g`` of the last-step rewards over tasks with at least two runs (0 when there are none; the
  reference's single-run placeholders 0 and 1 are not reported);
* ``group_advantages/single_run_task_count``: tasks with one run (advantage 0, dropped with a threshold);
* ``group_advantages/batch_reward_std``: ``σ_batch``, only with ``std_cal_level="batch"``;
* unprefixed, as in the reference: ``experience_count`` (experiences kept), ``filtered_count``
  (experiences dropped by ``std_threshold``), ``skipped_group_ratio`` (dropped tasks / tasks).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trinity_core.components.group_metrics import GROUP_PREFIX as PREFIX
from trinity_core.components.group_metrics import group_reward_metrics

__all__ = ["PREFIX", "step_wise_metrics"]


def step_wise_metrics(
    group_mean: Tensor,
    group_std: Tensor,
    group_valid: Tensor,
    group_kept: Tensor,
    kept_count: Tensor,
    total_count: int,
    batch_std: Tensor | None = None,
) -> dict[str, Tensor]:
    """The metric dict of the module docstring from per-task tensors (``(G,)`` each)."""
    metrics = group_reward_metrics(group_mean, group_std, group_valid)
    metrics[f"{PREFIX}/single_run_task_count"] = (~group_valid).sum()
    if batch_std is not None:
        metrics[f"{PREFIX}/batch_reward_std"] = batch_std.detach().to(torch.float64)
    metrics["experience_count"] = kept_count
    metrics["filtered_count"] = total_count - kept_count
    tasks = max(group_valid.shape[0], 1)
    metrics["skipped_group_ratio"] = (~group_kept).sum().to(torch.float64) / tasks
    return metrics
