"""GiGPO metrics as 0-d tensors, identical on both paths (no host synchronisation).

* ``gigpo/episode_reward_mean/{mean,max,min}``, ``gigpo/episode_reward_std/{mean,max,min}``: mean and
  unbiased std of the episode returns of each task with at least two runs (0 when there are none). The
  std is the std whatever ``fnorm`` (the reference reports the normaliser, 1.0 with ``fnorm="none"``);
* ``gigpo/single_run_task_count``: tasks with one run (``A_E = 0``);
* ``gigpo/anchor_groups_total``, ``gigpo/anchor_groups_size_gt1``, ``gigpo/anchor_group_hit_ratio``
  (``size_gt1 / total``, 0 without anchors): anchor groups, counted per task;
* ``gigpo/mean_abs_A_E``, ``gigpo/mean_abs_A_S``: mean ``|A_E|`` and ``|A_S|`` over the experiences;
* ``experience_count`` (unprefixed, as in the reference).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trinity_core.components.group_metrics import group_reward_metrics

__all__ = ["PREFIX", "gigpo_metrics"]

PREFIX = "gigpo"


def gigpo_metrics(
    episode_mean: Tensor,
    episode_std: Tensor,
    task_valid: Tensor,
    anchors_total: Tensor,
    anchors_gt1: Tensor,
    abs_episode_sum: Tensor,
    abs_step_sum: Tensor,
    count: int,
) -> dict[str, Tensor]:
    """The metric dict of the module docstring from per-task tensors and batch totals."""
    metrics = group_reward_metrics(
        episode_mean,
        episode_std,
        task_valid,
        prefix=PREFIX,
        names=("episode_reward_mean", "episode_reward_std"),
    )
    n = max(count, 1)
    metrics[f"{PREFIX}/single_run_task_count"] = (~task_valid).sum()
    metrics[f"{PREFIX}/anchor_groups_total"] = anchors_total
    metrics[f"{PREFIX}/anchor_groups_size_gt1"] = anchors_gt1
    metrics[f"{PREFIX}/anchor_group_hit_ratio"] = anchors_gt1.to(torch.float64) / anchors_total.clamp_min(1)
    metrics[f"{PREFIX}/mean_abs_A_E"] = abs_episode_sum.to(torch.float64) / n
    metrics[f"{PREFIX}/mean_abs_A_S"] = abs_step_sum.to(torch.float64) / n
    metrics["experience_count"] = torch.tensor(count)
    return metrics
