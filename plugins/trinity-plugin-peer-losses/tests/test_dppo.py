"""``dppo_tv`` and ``dppo_kl``: trust-region masks and TIS by hand, binary KL, masking, syncs, invariance."""

from __future__ import annotations

import math

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
from trinity_plugin_peer_losses import DPPOKLPolicyLossFn, DPPOTVPolicyLossFn
from trinity_plugin_peer_losses.dppo_kl import BINARY_KL_EPS, binary_kl

LOSSES = (DPPOTVPolicyLossFn, DPPOKLPolicyLossFn)

# Six tokens, p_old = 0.5 everywhere, δ = 0.2. r = p / 0.5.
#   t  p    A    p−p_old  TV in?                      binary KL(0.5‖p)          KL in?
#   0  0.8  +1   +0.3     no  (0.3 > δ_high)          ½ln(25/16) = 0.2231 > δ   no  (moved up, A > 0)
#   1  0.6  +1   +0.1     yes                         ½ln(25/24) = 0.0204       yes
#   2  0.2  −1   −0.3     no  (−0.3 < −δ_low)         ½ln(25/16) = 0.2231 > δ   no  (moved down, A < 0)
#   3  0.4  −2   −0.1     yes                         ½ln(25/24) = 0.0204       yes
#   4  0.2  +1   −0.3     yes (moved against A)       0.2231 > δ but p <= p_old yes
#   5  0.9  −1   +0.4     yes (moved against A)       ½ln(25/9) = 0.5108 > δ, p >= p_old yes
# Inside tokens: ℓ = −A·min(r, C)·logπ; ∂ℓ/∂logπ = −A·min(r, C); token-mean divides by 6:
#   grad = (0, −1.2, 0, 2·0.8, −0.4, 1.8) / 6 with C = 20; with C = 1.5 token 5's weight is 1.5.
P = torch.tensor([[0.8, 0.6, 0.2, 0.4, 0.2, 0.9]], dtype=torch.float64)
A = torch.tensor([[1.0, 1.0, -1.0, -2.0, 1.0, -1.0]], dtype=torch.float64)
INSIDE = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
R = P / 0.5


def golden_inputs() -> dict[str, torch.Tensor]:
    return {
        "log_prob": P.log(),
        "old_log_probs": torch.full_like(P, math.log(0.5)),
        "response_mask": torch.ones_like(P, dtype=torch.bool),
        "advantages": A,
    }


@pytest.mark.parametrize("cls", LOSSES)
def test_golden_values(cls: type) -> None:
    loss, metrics, grad = grad_of(cls(), golden_inputs())
    expected_loss = (-A * R * P.log() * INSIDE).sum() / 6
    assert loss.item() == pytest.approx(expected_loss.item(), abs=1e-12)
    torch.testing.assert_close(grad, -A * R * INSIDE / 6, rtol=1e-12, atol=1e-15)
    assert metrics[f"{cls.metric_prefix}_loss"].item() == pytest.approx(expected_loss.item(), abs=1e-12)
    assert metrics["pg_clipfrac"].item() == pytest.approx(2 / 6)
    assert metrics["tis_clipfrac"].item() == 0.0
    assert metrics["ppo_kl"].item() == pytest.approx(-(R.log().mean()).item(), abs=1e-12)


@pytest.mark.parametrize("cls", LOSSES)
def test_truncated_importance_weight(cls: type) -> None:
    # C = 1.5 truncates token 5 (r = 1.8, inside) only: its gradient becomes 1·1.5/6 = 0.25.
    _, metrics, grad = grad_of(cls(clip_ratio_c=1.5), golden_inputs())
    expected = -A * R.clamp(max=1.5) * INSIDE / 6
    assert grad[0, 5].item() == pytest.approx(0.25)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert metrics["tis_clipfrac"].item() == pytest.approx(1 / 6)


def test_tv_asymmetric_thresholds() -> None:
    # δ_high = 0.35 admits token 0 (+0.3); δ_low = 0.35 admits token 2 (−0.3).
    _, metrics, grad = grad_of(DPPOTVPolicyLossFn(clip_divergence_high=0.35), golden_inputs())
    assert grad[0, 0].item() == pytest.approx(-1.6 / 6)
    assert grad[0, 2].item() == 0.0
    assert metrics["pg_clipfrac"].item() == pytest.approx(1 / 6)
    _, _, grad = grad_of(DPPOTVPolicyLossFn(clip_divergence_low=0.35), golden_inputs())
    assert grad[0, 2].item() == pytest.approx(0.4 / 6)
    assert grad[0, 0].item() == 0.0


def test_kl_threshold_in_nats() -> None:
    # δ = 0.25 nats > ½ln(25/16) = 0.2231: tokens 0 and 2 are admitted; δ = 0.22 < 0.2231 is not enough.
    _, metrics, _ = grad_of(DPPOKLPolicyLossFn(clip_divergence=0.25), golden_inputs())
    assert metrics["pg_clipfrac"].item() == 0.0
    _, metrics, _ = grad_of(DPPOKLPolicyLossFn(clip_divergence=0.22), golden_inputs())
    assert metrics["pg_clipfrac"].item() == pytest.approx(2 / 6)


def test_binary_kl_closed_forms() -> None:
    lp = torch.tensor([0.8, 0.6, 0.9, 0.5], dtype=torch.float64).log()
    old = torch.full_like(lp, math.log(0.5))
    expected = torch.tensor(
        [0.5 * math.log(25 / 16), 0.5 * math.log(25 / 24), 0.5 * math.log(25 / 9), 0.0], dtype=torch.float64
    )
    torch.testing.assert_close(binary_kl(lp, old), expected, rtol=1e-7, atol=1e-8)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(1e-6, 1 - 1e-6), q=st.floats(1e-6, 1 - 1e-6))
def test_binary_kl_matches_definition(p: float, q: float) -> None:
    # KL(Bern(q) ‖ Bern(p)) with the ε of verl inside the second logarithm.
    expected = q * (math.log(q) - math.log(p)) + (1 - q) * math.log(
        (1 - q + BINARY_KL_EPS) / (1 - p + BINARY_KL_EPS)
    )
    got = binary_kl(
        torch.tensor(math.log(p), dtype=torch.float64), torch.tensor(math.log(q), dtype=torch.float64)
    )
    assert got.item() == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert got.item() >= -1e-8


def test_binary_kl_finite_at_certainty_and_above() -> None:
    # p = 1 exactly (logπ = 0) and an invalid logπ > 0 still give a finite divergence.
    got = binary_kl(torch.tensor([0.0, 0.3]), torch.tensor([math.log(0.5), math.log(0.5)]))
    assert bool(torch.isfinite(got).all())


@pytest.mark.parametrize("cls", LOSSES)
def test_stale_ratio_is_clamped(cls: type) -> None:
    x = {
        "log_prob": torch.tensor([[-0.1, -0.2]], dtype=torch.float64),
        "old_log_probs": torch.tensor([[-80.0, -0.2]], dtype=torch.float64),
        "response_mask": torch.tensor([[True, True]]),
        "advantages": torch.tensor([[-1.0, 1.0]], dtype=torch.float64),
    }
    loss, metrics, grad = grad_of(cls(clip_ratio_c=1e12), x)
    # Token 0: p − p_old ≈ 0.905 ≥ −δ_low and moved against A < 0, so it stays inside, weight e^20.
    assert grad[0, 0].item() == pytest.approx(math.exp(20.0) / 2, rel=1e-12)
    assert torch.isfinite(loss)
    assert all(torch.isfinite(v) for v in metrics.values())


def test_defaults_and_validation() -> None:
    fn = DPPOTVPolicyLossFn()
    assert (fn.divergence_low, fn.divergence_high, fn.clip_ratio_c) == (0.2, 0.2, 20.0)
    fn = DPPOKLPolicyLossFn(clip_divergence=0.1, clip_divergence_high=0.3)
    assert (fn.divergence_low, fn.divergence_high) == (0.1, 0.3)
    with pytest.raises(pydantic.ValidationError, match="clip_divergence"):
        DPPOTVPolicyLossFn(clip_divergence=0.0)
    with pytest.raises(pydantic.ValidationError, match="clip_ratio_c"):
        DPPOKLPolicyLossFn(clip_ratio_c=-1.0)


@pytest.mark.parametrize("cls", LOSSES)
def test_masked_positions_leak_nowhere(cls: type) -> None:
    assert_nan_at_masked_positions_leaks_nowhere(cls(), loss_inputs(1, spread=1.0))


@pytest.mark.parametrize("cls", LOSSES)
def test_no_host_sync_and_detached_metrics(cls: type) -> None:
    keys = {f"{cls.metric_prefix}_loss", "ppo_kl", "pg_clipfrac", "tis_clipfrac"}
    assert_no_host_sync_and_detached_metrics(cls(), loss_inputs(2, spread=1.0), keys)


@pytest.mark.parametrize("cls", LOSSES)
@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batch_invariant(cls: type, mode: str) -> None:
    assert cls.microbatch_invariant
    assert_micro_batch_invariant(cls(loss_agg_mode=mode), loss_inputs(4, spread=1.0, empty_rows=True))
