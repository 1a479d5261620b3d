"""Numerical building blocks for losses and advantages: masked reductions, loss aggregation with global
normalizers, and float64 group statistics. Nothing here synchronises with the host.

Modules: :mod:`~trinity_core.ops.masked`, :mod:`~trinity_core.ops.aggregate`,
:mod:`~trinity_core.ops.loss_scale`, :mod:`~trinity_core.ops.segment`.
"""

from trinity_core.ops.aggregate import LOSS_AGG_MODES, aggregate_loss
from trinity_core.ops.loss_scale import LossScale, global_normalizers
from trinity_core.ops.masked import masked_mean, masked_sum, masked_var, masked_whiten
from trinity_core.ops.segment import (
    GroupStats,
    group_stats,
    segment_count,
    segment_mean,
    segment_std,
    segment_sum,
    segment_var,
)

__all__ = [
    "LOSS_AGG_MODES",
    "GroupStats",
    "LossScale",
    "aggregate_loss",
    "global_normalizers",
    "group_stats",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "segment_count",
    "segment_mean",
    "segment_std",
    "segment_sum",
    "segment_var",
]
