"""Numerical building blocks for losses and advantages, in plain torch: selection under a mask, masked
reductions, loss aggregation with global normalizers, the policy-loss ratio preamble, and float64 group
statistics. Nothing here synchronises with the host.

Modules: :mod:`~trinity_core.ops.select`, :mod:`~trinity_core.ops.masked`,
:mod:`~trinity_core.ops.aggregate`, :mod:`~trinity_core.ops.loss_scale`, :mod:`~trinity_core.ops.ratio`,
:mod:`~trinity_core.ops.segment`. Opt-in: :mod:`~trinity_core.ops.fast` (exact CPU speed kernels) and
:mod:`~trinity_core.ops.fused` (the ``fused=True`` loss path); neither is re-exported here.
"""

from trinity_core.ops.aggregate import LOSS_AGG_MODES, aggregate_loss
from trinity_core.ops.loss_scale import LossScale, global_normalizers
from trinity_core.ops.masked import masked_mean, masked_sum, masked_var, masked_whiten
from trinity_core.ops.ratio import LOG_RATIO_CLAMP, PolicyInputs, clamp_log_ratio, policy_inputs
from trinity_core.ops.segment import (
    GroupStats,
    group_stats,
    segment_count,
    segment_mean,
    segment_std,
    segment_sum,
    segment_var,
)
from trinity_core.ops.select import as_bool_mask, compute_dtype, select

__all__ = [
    "LOG_RATIO_CLAMP",
    "LOSS_AGG_MODES",
    "GroupStats",
    "LossScale",
    "PolicyInputs",
    "aggregate_loss",
    "as_bool_mask",
    "clamp_log_ratio",
    "compute_dtype",
    "global_normalizers",
    "group_stats",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_inputs",
    "segment_count",
    "segment_mean",
    "segment_std",
    "segment_sum",
    "segment_var",
    "select",
]
