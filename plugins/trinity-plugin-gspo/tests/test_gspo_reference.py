"""Comparison with the published reference ``trinity.algorithm.policy_loss_fn.gspo_policy_loss``: loss,
gradient and metrics agree on random inputs; the documented differences (defaults, overflow clamp,
empty rows) are tested."""

from __future__ import annotations

import math

import pytest
import torch
from gspo_support import grad_of, loss_inputs
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_gspo import GSPOLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_class() -> type:
    return import_reference("trinity.algorithm.policy_loss_fn.gspo_policy_loss").GSPOLossFn  # type: ignore[no-any-return]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["seq-mean-token-mean", "token-mean", "seq-mean-token-sum"]),
    clip=st.tuples(st.floats(1e-4, 0.3), st.floats(1e-4, 0.3)),
)
def test_loss_gradient_and_metrics_agree_with_the_reference(
    seed: int, mode: str, clip: tuple[float, float]
) -> None:
    args = {"clip_range_low": clip[0], "clip_range_high": clip[1], "loss_agg_mode": mode}
    x = loss_inputs(seed, spread=0.2)
    ours = grad_of(GSPOLossFn(**args), x)
    theirs = grad_of(reference_class()(**args), x)
    # The reference divides by (count + 1e-8): agreement to ~1e-8 relative.
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-9)
    for key in ("pg_clipfrac", "ppo_kl", "pg_loss", "ppo_kl_seq"):
        assert float(ours[1][key]) == pytest.approx(theirs[1][key], rel=1e-6, abs=1e-9), key


def test_defaults_construct_where_the_reference_raises() -> None:
    # Reference __init__ defaults are None and raise; its default_args() says 3e-4 / 4e-4 (args-one-source).
    with pytest.raises(ValueError, match="clip_range"):
        reference_class()()
    ref_defaults = reference_class().default_args()
    ours = GSPOLossFn()
    assert (ours.clip_range_low, ours.clip_range_high) == (
        ref_defaults["clip_range_low"],
        ref_defaults["clip_range_high"],
    )
    assert ours.loss_agg_mode == ref_defaults["loss_agg_mode"]
    x = loss_inputs(1, spread=1e-4)
    ours_out = grad_of(ours, x)
    theirs_out = grad_of(reference_class()(**ref_defaults), x)
    torch.testing.assert_close(ours_out[2], theirs_out[2], rtol=1e-6, atol=1e-9)


def test_reference_overflows_where_the_clamp_keeps_the_loss_finite() -> None:
    # One stale sequence with mean log-ratio 100 and A < 0 (the unclipped branch is active): in float32 the
    # reference's e^100 is inf; ours is capped at e^10.
    x = {
        "log_prob": torch.tensor([[100.0, 100.0], [0.0, 0.0]]),
        "old_log_probs": torch.zeros(2, 2),
        "response_mask": torch.ones(2, 2, dtype=torch.bool),
        "advantages": torch.tensor([[-1.0], [1.0]]).expand(2, 2),
    }
    args = {"clip_range": 0.2, "loss_agg_mode": "token-mean"}
    ours = grad_of(GSPOLossFn(**args), x)
    theirs = grad_of(reference_class()(**args), x)
    assert math.isinf(float(theirs[0]))
    assert float(ours[0]) == pytest.approx((2 * math.exp(10.0) - 2.0) / 4, rel=1e-6)
    assert bool(torch.isfinite(ours[2]).all())


def test_empty_rows_are_skipped_where_the_reference_counts_them_as_zero() -> None:
    # ppo_kl_seq and the seq-mean-token-mean denominator count only rows with a selected token
    # (the reference counts empty rows too: loss-aggregation).
    x = loss_inputs(2, b=4, empty_rows=True)
    args = {"clip_range": 0.2}
    ours = grad_of(GSPOLossFn(**args), x)
    theirs = grad_of(reference_class()(**args), x)
    mask = x["response_mask"]
    delta = torch.where(mask, x["log_prob"] - x["old_log_probs"], 0.0)
    per_row = -delta.sum(-1) / mask.sum(-1).clamp_min(1)
    assert float(ours[1]["ppo_kl_seq"]) == pytest.approx(float(per_row[1:].mean()), rel=1e-12)
    assert theirs[1]["ppo_kl_seq"] == pytest.approx(float(per_row.sum() / 4), rel=1e-6)
    torch.testing.assert_close(ours[2], theirs[2] * 4 / 3, rtol=1e-6, atol=1e-9)
