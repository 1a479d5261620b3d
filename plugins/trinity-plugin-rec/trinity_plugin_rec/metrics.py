"""REC metrics as 0-d tensors, identical on the per-group and the vectorized path (no host sync).

* ``group_advantages/reward_mean/{mean,max,min}``, ``group_advantages/reward_std/{mean,max,min}``: the
  second-pass ``μ_g`` and biased ``σ_g`` over groups with at least two members (0 when there are none;
  the reference's singleton placeholders 0 and 1 are not reported);
* ``group_advantages/drop_balance/{mean,max,min}``: the fraction ``e_g / n_g`` of each such group dropped by
  the balance drop (0 without it);
* ``group_advantages/singleton_count``: experiences alone in their group (advantage 0);
* ``filtered_count`` (unprefixed): experiences removed from the output by the balance drop (0 with
  ``keep_dropped=True``, where they stay with advantage 0 as in the reference).
"""

from __future__ import annotations

from torch import Tensor

from trinity_core.components import summarize_masked_metric
from trinity_core.components.group_metrics import GROUP_PREFIX as PREFIX
from trinity_core.components.group_metrics import group_reward_metrics

__all__ = ["PREFIX", "rec_metrics"]


def rec_metrics(
    group_mean: Tensor,
    group_std: Tensor,
    drop_fraction: Tensor,
    group_size: Tensor,
    filtered_count: Tensor,
) -> dict[str, Tensor]:
    """The metric dict of the module docstring from per-group tensors (``(G,)`` each)."""
    valid = group_size > 1
    metrics = group_reward_metrics(group_mean, group_std, valid)
    metrics.update(summarize_masked_metric(drop_fraction, valid, "drop_balance", PREFIX))
    metrics[f"{PREFIX}/singleton_count"] = (group_size == 1).sum()
    metrics["filtered_count"] = filtered_count
    return metrics
