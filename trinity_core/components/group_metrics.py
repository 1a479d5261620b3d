"""Metrics of group computations: per-group statistics summarised over the groups, as 0-d tensors.

Group advantages report the mean and std of each group's rewards summarised (``mean``, ``max``, ``min``)
over the groups that have statistics, e.g. ``group_advantages/reward_mean/max``. The vectorized path
has those statistics as ``(G,)`` tensors; the per-group path (trinity-rft's per-group API, one
``calculate_group_advantage`` call per group) collects one metric dict per group, which
:func:`run_per_group` and :func:`metric_column` turn into the same ``(G,)`` tensors, so both paths report
through the same code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trinity_core.components.advantage import GroupComputation
from trinity_core.components.base import Metrics, summarize_masked_metric
from trinity_core.experience import Experience

__all__ = ["GROUP_PREFIX", "group_reward_metrics", "metric_column", "run_per_group"]

GROUP_PREFIX = "group_advantages"
"""The metric prefix of the GRPO family (as in trinity-rft 0.6.0)."""


def group_reward_metrics(
    group_mean: Tensor,
    group_std: Tensor,
    valid: Tensor,
    *,
    prefix: str = GROUP_PREFIX,
    names: tuple[str, str] = ("reward_mean", "reward_std"),
) -> dict[str, Tensor]:
    """``{prefix}/{name}/{mean,max,min}`` of ``group_mean`` and ``group_std`` over the ``valid`` groups.

    Each value is a 0-d float64 tensor, 0 when no group is valid (no host synchronisation).

    Args:
        group_mean: ``(G,)`` mean reward of each group.
        group_std: ``(G,)`` reward std of each group.
        valid: ``(G,)`` bool, the groups that have statistics (typically at least two members).
        prefix: metric prefix.
        names: metric names of the mean and of the std.
    """
    metrics = summarize_masked_metric(group_mean, valid, names[0], prefix)
    metrics.update(summarize_masked_metric(group_std, valid, names[1], prefix))
    return metrics


def run_per_group(
    computation: GroupComputation, exps: list[Experience], **kwargs: Any
) -> tuple[list[Experience], list[Metrics]]:
    """Call ``calculate_group_advantage`` on each group of ``exps``: the kept experiences and the metrics.

    Groups come from ``computation.group_experiences`` (first-appearance order); ``kwargs`` go to every
    call (e.g. ``precomputed_std``). The per-group path of a group computation, written once.
    """
    out: list[Experience] = []
    per_group: list[Metrics] = []
    for group_id, group in computation.group_experiences(list(exps)).items():
        kept, metrics = computation.calculate_group_advantage(group_id, group, **kwargs)
        out.extend(kept)
        per_group.append(metrics)
    return out, per_group


def metric_column(per_group: list[Metrics], key: str, dtype: torch.dtype = torch.float64) -> Tensor:
    """``(G,)`` tensor of ``dtype`` holding metric ``key`` of each group's dict (numbers or 0-d tensors)."""
    return torch.tensor([float(m[key]) for m in per_group], dtype=dtype)
