"""The ``sppo`` policy loss: log-ratio policy gradient inside the trust band [1/(1+ε), 1+ε]."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sppo_support import (
    AGG_MODES,
    agg_denominator,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
)
from trinity_plugin_sppo import sPPOPolicyLossFn

METRIC_KEYS = {"pg_loss", "pg_clipfrac"}


def test_defaults_and_keys() -> None:
    assert sPPOPolicyLossFn.default_args() == {"loss_agg_mode": "token-mean", "epsilon": 0.3}
    assert sPPOPolicyLossFn().select_keys == ["old_log_probs", "response_mask", "advantages"]
    assert sPPOPolicyLossFn().log_band == pytest.approx(math.log(1.3))
    with pytest.raises(pydantic.ValidationError, match="epsilon"):
        sPPOPolicyLossFn(epsilon=0.0)


def test_golden_values() -> None:
    # ε = 0.3, band |δ| <= log 1.3 = 0.2624. δ = 0.1 (in), 0.3 (out), -0.3 (out), -0.2 (in), padding.
    # token-mean over 4: L = -(1·0.1 + (-2)(-0.2)) / 4; ∂L/∂logπ = -A / 4 inside the band, 0 outside.
    old = torch.tensor([[-1.0, -2.0, -1.5, -0.5, -1.0]], dtype=torch.float64)
    delta = torch.tensor([[0.1, 0.3, -0.3, -0.2, 0.0]], dtype=torch.float64)
    x = {
        "log_prob": old + delta,
        "old_log_probs": old,
        "response_mask": torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool),
        "advantages": torch.tensor([[1.0, 2.0, -1.0, -2.0, 3.0]], dtype=torch.float64),
    }
    loss, metrics, grad = grad_of(sPPOPolicyLossFn(), x)
    assert float(loss) == pytest.approx(-(0.1 + 0.4) / 4, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-1 / 4, 0.0, 0.0, 2 / 4, 0.0]], dtype=torch.float64))
    assert float(metrics["pg_clipfrac"]) == pytest.approx(2 / 4)
    assert float(metrics["pg_loss"]) == float(loss)


def test_band_is_inclusive_and_symmetric_in_log_space() -> None:
    eps = 0.5
    edge = math.log1p(eps)
    old = torch.zeros(1, 4, dtype=torch.float64)
    x = {
        "log_prob": torch.tensor([[edge, -edge, edge + 1e-9, -edge - 1e-9]], dtype=torch.float64),
        "old_log_probs": old,
        "response_mask": torch.ones(1, 4, dtype=torch.bool),
        "advantages": torch.ones(1, 4, dtype=torch.float64),
    }
    _, metrics, grad = grad_of(sPPOPolicyLossFn(epsilon=eps), x)
    torch.testing.assert_close(grad, torch.tensor([[-0.25, -0.25, 0.0, 0.0]], dtype=torch.float64))
    assert float(metrics["pg_clipfrac"]) == 0.5


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), mode=st.sampled_from(AGG_MODES[:3]), eps=st.floats(0.01, 2.0))
def test_autograd_equals_the_analytic_gradient(seed: int, mode: str, eps: float) -> None:
    x = loss_inputs(seed, spread=0.4)
    _, _, grad = grad_of(sPPOPolicyLossFn(epsilon=eps, loss_agg_mode=mode), x)
    mask, adv = x["response_mask"], x["advantages"]
    r = torch.exp(x["log_prob"] - x["old_log_probs"])
    inside = (r >= 1 / (1 + eps)) & (r <= 1 + eps)
    expected = torch.where(mask & inside, -adv / agg_denominator(mask, mode), 0.0)
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)


def test_stale_tokens_are_outside_the_band_without_overflow() -> None:
    x = {
        "log_prob": torch.tensor([[800.0, -800.0, 0.1]]),
        "old_log_probs": torch.zeros(1, 3),
        "response_mask": torch.ones(1, 3, dtype=torch.bool),
        "advantages": torch.tensor([[1.0, -1.0, 1.0]]),
    }
    loss, metrics, grad = grad_of(sPPOPolicyLossFn(), x)
    assert float(loss) == pytest.approx(-0.1 / 3, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, -1 / 3]]))
    assert float(metrics["pg_clipfrac"]) == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", [0, 1])
def test_nan_at_masked_positions_leaks_nowhere(seed: int) -> None:
    assert_nan_at_masked_positions_leaks_nowhere(sPPOPolicyLossFn(), loss_inputs(seed, spread=0.4))


def test_metrics_are_detached_zero_dim_tensors_without_host_sync() -> None:
    assert_no_host_sync_and_detached_metrics(sPPOPolicyLossFn(), loss_inputs(0), METRIC_KEYS)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(mode: str) -> None:
    assert_micro_batch_invariant(
        sPPOPolicyLossFn(loss_agg_mode=mode), loss_inputs(4, b=6, spread=0.4, empty_rows=True)
    )
