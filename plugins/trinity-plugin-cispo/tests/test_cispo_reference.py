"""Comparison with the published reference ``trinity.algorithm.policy_loss_fn.cispo_policy_loss``: loss,
gradient and metrics agree on random inputs, with and without the token mask; the overflow clamp is the
tested difference."""

from __future__ import annotations

import math

import pytest
import torch
from cispo_support import grad_of, loss_inputs
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_cispo import CISPOPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_class() -> type:
    return import_reference("trinity.algorithm.policy_loss_fn.cispo_policy_loss").CISPOPolicyLossFn  # type: ignore[no-any-return]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]),
    enable=st.booleans(),
    bounds=st.tuples(st.floats(0.1, 1.0), st.floats(0.1, 0.5)),
)
def test_loss_gradient_and_metrics_agree_with_the_reference(
    seed: int, mode: str, enable: bool, bounds: tuple[float, float]
) -> None:
    args = {
        "clip_range_low": bounds[0],
        "clip_range_high": bounds[1],
        "enable_mask_clip": enable,
        "mask_clip_range_low": bounds[0] / 2,
        "mask_clip_range_high": bounds[1],
        "loss_agg_mode": mode,
    }
    x = loss_inputs(seed, spread=0.8)
    ours = grad_of(CISPOPolicyLossFn(**args), x)
    theirs = grad_of(reference_class()(**args), x)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-9)
    for key in ("cispo_loss", "ppo_kl", "unmasked_frac"):
        assert float(ours[1][key]) == pytest.approx(theirs[1][key], rel=1e-6, abs=1e-9), key


def test_the_clamp_changes_only_weights_below_e_minus_20() -> None:
    # Huge ratios: the reference's exp overflows to inf, but clip(inf, ., 1.28) = 1.28, as ours: identical.
    # Tiny ratios with no lower bound (clip_range_low = 1): the weight is e^-20 here, e^-30 there.
    x = {
        "log_prob": torch.tensor([[-0.1, -0.2, -0.3]], dtype=torch.float64),
        "old_log_probs": torch.tensor([[-800.0, 29.8, -0.1]], dtype=torch.float64),
        "response_mask": torch.ones(1, 3, dtype=torch.bool),
        "advantages": torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64),
    }
    ours = grad_of(CISPOPolicyLossFn(), x)
    theirs = grad_of(reference_class()(), x)
    r2 = math.exp(-0.2)
    torch.testing.assert_close(
        ours[2], torch.tensor([[-1.28 / 3, math.exp(-20.0) / 3, -r2 / 3]], dtype=torch.float64)
    )
    torch.testing.assert_close(
        theirs[2], torch.tensor([[-1.28 / 3, math.exp(-30.0) / 3, -r2 / 3]], dtype=torch.float64)
    )
    assert float(ours[1]["ppo_kl"]) == pytest.approx(theirs[1]["ppo_kl"], rel=1e-12)
