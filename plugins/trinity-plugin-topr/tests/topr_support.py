"""This plugin's loss-test helpers: those of the kit (:mod:`trinity_core.testing.loss_checks`)."""

from trinity_core.testing.loss_checks import (
    AGG_MODES,
    agg_denominator,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
)

__all__ = [
    "AGG_MODES",
    "agg_denominator",
    "assert_micro_batch_invariant",
    "assert_nan_at_masked_positions_leaks_nowhere",
    "assert_no_host_sync_and_detached_metrics",
    "grad_of",
    "loss_inputs",
]
