"""Comparison with the published reference ``trinity.algorithm.policy_loss_fn.topr_policy_loss``: loss,
gradient and metrics agree on random inputs; the overflow clamp of ``avg_ratio`` is the tested
difference."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from topr_support import grad_of, loss_inputs
from trinity_plugin_topr import TOPRPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_class() -> type:
    return import_reference("trinity.algorithm.policy_loss_fn.topr_policy_loss").TOPRPolicyLossFn  # type: ignore[no-any-return]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]),
    threshold=st.floats(-0.5, 0.5),
)
def test_loss_gradient_and_metrics_agree_with_the_reference(seed: int, mode: str, threshold: float) -> None:
    args = {"advantage_threshold": threshold, "loss_agg_mode": mode}
    x = loss_inputs(seed, spread=1.0)
    ours = grad_of(TOPRPolicyLossFn(**args), x)
    theirs = grad_of(reference_class()(**args), x)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-9)
    for key in ("topr_loss", "avg_alpha", "avg_ratio"):
        assert float(ours[1][key]) == pytest.approx(theirs[1][key], rel=1e-6, abs=1e-9), key


def test_avg_ratio_overflows_in_the_reference_but_not_here() -> None:
    x = {
        "log_prob": torch.tensor([[-0.1, -0.2]]),
        "old_log_probs": torch.tensor([[-200.0, -0.1]]),
        "response_mask": torch.ones(1, 2, dtype=torch.bool),
        "advantages": torch.tensor([[-1.0, 1.0]]),
    }
    ours = grad_of(TOPRPolicyLossFn(), x)
    theirs = grad_of(reference_class()(), x)
    assert math.isinf(theirs[1]["avg_ratio"])
    assert math.isfinite(float(ours[1]["avg_ratio"]))
    # α = clip(r, 0, 1) is 1 either way: loss and gradient agree.
    torch.testing.assert_close(ours[0], theirs[0])
    torch.testing.assert_close(ours[2], theirs[2])
