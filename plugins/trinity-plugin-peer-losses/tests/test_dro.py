"""``dro``: golden values by hand, unclamped penalty gradient, validation, masking, syncs, invariance."""

from __future__ import annotations

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from peer_losses_support import (
    AGG_MODES,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
)
from trinity_plugin_peer_losses import DROPolicyLossFn


def golden_inputs() -> dict[str, torch.Tensor]:
    return {
        "log_prob": torch.tensor([[-0.8, -0.9, -0.1]], dtype=torch.float64),
        "old_log_probs": torch.tensor([[-1.0, -0.7, -0.2]], dtype=torch.float64),
        "response_mask": torch.tensor([[1.0, 1.0, 0.0]]),
        "advantages": torch.tensor([[2.0, -1.5, 9.0]], dtype=torch.float64),
    }


def test_golden_value_and_gradient() -> None:
    # β = 0.05, δ = (0.2, −0.2), β/2·δ² = 0.001 on both tokens; the third is masked.
    #   ℓ1 = −(2·(−0.8) − 0.001) = 1.601,  ℓ2 = −((−1.5)·(−0.9) − 0.001) = −1.349
    #   token-mean = (1.601 − 1.349) / 2 = 0.126
    #   ∂ℓ/∂logπ = (−A + βδ)/2 = ((−2 + 0.01)/2, (1.5 − 0.01)/2) = (−0.995, 0.745)
    loss, metrics, grad = grad_of(DROPolicyLossFn(dro_beta=0.05), golden_inputs())
    assert loss.item() == pytest.approx(0.126, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-0.995, 0.745, 0.0]], dtype=torch.float64))
    assert metrics["dro_loss"].item() == pytest.approx(0.126, abs=1e-12)
    assert metrics["ppo_kl"].item() == pytest.approx(0.0, abs=1e-12)
    assert metrics["dro_penalty"].item() == pytest.approx(0.001, abs=1e-12)


def test_penalty_is_not_clamped() -> None:
    # δ = 30 (beyond the ±20 ratio clamp of the other losses): ∂ℓ/∂logπ = −A + βδ = 0 + 0.1·30 = 3.
    x = {
        "log_prob": torch.tensor([[-0.5]], dtype=torch.float64),
        "old_log_probs": torch.tensor([[-30.5]], dtype=torch.float64),
        "response_mask": torch.tensor([[True]]),
        "advantages": torch.tensor([[0.0]], dtype=torch.float64),
    }
    loss, _, grad = grad_of(DROPolicyLossFn(dro_beta=0.1), x)
    assert loss.item() == pytest.approx(0.05 * 900, rel=1e-12)
    assert grad.item() == pytest.approx(3.0, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), beta=st.floats(1e-3, 10.0))
def test_matches_direct_formula(seed: int, beta: float) -> None:
    x = loss_inputs(seed, spread=1.0)
    mask = x["response_mask"]
    loss, _, grad = grad_of(DROPolicyLossFn(dro_beta=beta), x)
    delta = x["log_prob"] - x["old_log_probs"]
    per_token = -(x["log_prob"] * x["advantages"] - 0.5 * beta * delta**2)
    n = mask.sum()
    torch.testing.assert_close(loss, per_token[mask].sum() / n, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, torch.where(mask, (-x["advantages"] + beta * delta) / n, 0.0))


@pytest.mark.parametrize("beta", [0.0, -1.0, float("nan"), float("inf")])
def test_beta_must_be_positive_and_finite(beta: float) -> None:
    with pytest.raises(pydantic.ValidationError, match="dro_beta"):
        DROPolicyLossFn(dro_beta=beta)


def test_masked_positions_leak_nowhere() -> None:
    assert_nan_at_masked_positions_leaks_nowhere(DROPolicyLossFn(dro_beta=0.3), loss_inputs(1))


def test_no_host_sync_and_detached_metrics() -> None:
    keys = {"dro_loss", "ppo_kl", "dro_penalty"}
    assert_no_host_sync_and_detached_metrics(DROPolicyLossFn(), loss_inputs(2), keys)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batch_invariant(mode: str) -> None:
    assert DROPolicyLossFn.microbatch_invariant
    assert_micro_batch_invariant(DROPolicyLossFn(loss_agg_mode=mode), loss_inputs(4, empty_rows=True))
