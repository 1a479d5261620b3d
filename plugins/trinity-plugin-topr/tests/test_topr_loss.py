"""The ``topr`` policy loss: truncated ratio on negative examples, stop-gradient weight, masking."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from topr_support import (
    AGG_MODES,
    agg_denominator,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
)
from trinity_plugin_topr import TOPRPolicyLossFn

METRIC_KEYS = {"topr_loss", "avg_alpha", "avg_ratio"}


def test_defaults_and_keys() -> None:
    assert TOPRPolicyLossFn.default_args() == {"loss_agg_mode": "token-mean", "advantage_threshold": 0.0}
    assert TOPRPolicyLossFn().select_keys == ["old_log_probs", "response_mask", "advantages"]
    assert TOPRPolicyLossFn(backend="tinker").select_keys == ["old_logprob", "action_mask", "advantages"]
    with pytest.raises(pydantic.ValidationError, match="advantage_threshold"):
        TOPRPolicyLossFn(advantage_threshold=math.nan)


def test_golden_values() -> None:
    # One row, token-mean over 4 selected tokens (the 5th is padding):
    #   t0: A = +1, r = 2   -> α = 1 (positive),         ℓ = −1 · logπ0
    #   t1: A = −1, r = 0.5 -> α = 0.5 (truncated ratio), ℓ = +0.5 · logπ1
    #   t2: A = −2, r = 3   -> α = 1 (ratio clipped to 1), ℓ = +2 · logπ2
    #   t3: A = 0,  r = 0.25 -> α = 0.25 (A ≤ 0),        ℓ = 0
    old = torch.tensor([[-1.0, -2.0, -1.5, -0.5, -1.0]], dtype=torch.float64)
    ratio = torch.tensor([[2.0, 0.5, 3.0, 0.25, 7.0]], dtype=torch.float64)
    x = {
        "log_prob": old + torch.log(ratio),
        "old_log_probs": old,
        "response_mask": torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool),
        "advantages": torch.tensor([[1.0, -1.0, -2.0, 0.0, 5.0]], dtype=torch.float64),
    }
    loss, metrics, grad = grad_of(TOPRPolicyLossFn(), x)
    lp = x["log_prob"][0].tolist()
    assert float(loss) == pytest.approx((-1 * lp[0] + 0.5 * lp[1] + 2 * lp[2] + 0.0) / 4, rel=1e-12)
    # ∂L/∂logπ = −α A / 4 (α is a constant of the gradient).
    expected = torch.tensor([[-1 / 4, 0.5 / 4, 2 / 4, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["avg_alpha"]) == pytest.approx((1 + 0.5 + 1 + 0.25) / 4)
    assert float(metrics["avg_ratio"]) == pytest.approx((2 + 0.5 + 3 + 0.25) / 4)
    assert float(metrics["topr_loss"]) == float(loss)


def test_threshold_moves_the_boundary_between_positive_and_negative() -> None:
    old = torch.zeros(1, 2, dtype=torch.float64)
    x = {
        "log_prob": torch.log(torch.tensor([[0.5, 0.5]], dtype=torch.float64)),
        "old_log_probs": old,
        "response_mask": torch.ones(1, 2, dtype=torch.bool),
        "advantages": torch.tensor([[0.5, 1.5]], dtype=torch.float64),
    }
    _, metrics, grad = grad_of(TOPRPolicyLossFn(advantage_threshold=1.0), x)
    # A = 0.5 <= 1 is negative: α = 0.5; A = 1.5 > 1: α = 1.
    torch.testing.assert_close(grad, torch.tensor([[-0.5 * 0.5 / 2, -1.5 / 2]], dtype=torch.float64))
    assert float(metrics["avg_alpha"]) == pytest.approx(0.75)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), mode=st.sampled_from(AGG_MODES[:3]), threshold=st.floats(-1, 1))
def test_autograd_equals_the_analytic_gradient(seed: int, mode: str, threshold: float) -> None:
    x = loss_inputs(seed, spread=1.0)
    x["advantages"] = torch.randn(
        x["advantages"].shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )
    _, _, grad = grad_of(TOPRPolicyLossFn(advantage_threshold=threshold, loss_agg_mode=mode), x)
    mask, adv = x["response_mask"], x["advantages"]
    r = torch.exp(x["log_prob"] - x["old_log_probs"])
    alpha = torch.where(adv <= threshold, r.clamp(max=1.0), 1.0)
    expected = torch.where(mask, -alpha * adv / agg_denominator(mask, mode), 0.0)
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)


def test_ratio_is_clamped_against_overflow() -> None:
    x = {
        "log_prob": torch.tensor([[-0.1, -0.2]]),
        "old_log_probs": torch.tensor([[-200.0, -0.1]]),
        "response_mask": torch.ones(1, 2, dtype=torch.bool),
        "advantages": torch.tensor([[-1.0, -1.0]]),
    }
    loss, metrics, grad = grad_of(TOPRPolicyLossFn(), x)
    assert math.isfinite(float(metrics["avg_ratio"]))
    assert float(metrics["avg_ratio"]) == pytest.approx((math.exp(20.0) + math.exp(-0.1)) / 2, rel=1e-5)
    assert float(metrics["avg_alpha"]) == pytest.approx((1.0 + math.exp(-0.1)) / 2, rel=1e-6)
    assert torch.isfinite(loss)
    assert bool(torch.isfinite(grad).all())


@pytest.mark.parametrize("seed", [0, 1])
def test_nan_at_masked_positions_leaks_nowhere(seed: int) -> None:
    assert_nan_at_masked_positions_leaks_nowhere(TOPRPolicyLossFn(), loss_inputs(seed, spread=1.0))


def test_metrics_are_detached_zero_dim_tensors_without_host_sync() -> None:
    assert_no_host_sync_and_detached_metrics(TOPRPolicyLossFn(), loss_inputs(0), METRIC_KEYS)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(mode: str) -> None:
    assert_micro_batch_invariant(TOPRPolicyLossFn(loss_agg_mode=mode), loss_inputs(4, b=6, empty_rows=True))
