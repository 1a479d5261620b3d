"""The ``geo_mean`` (GMPO) policy loss: geometric mean of sign-aware clipped ratios per sequence."""

from __future__ import annotations

import math

import pytest
import torch
from gspo_support import (
    AGG_MODES,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_gspo import GMPOPolicyLossFn

METRIC_KEYS = {"pg_loss", "pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "geo_ratio_mean"}


def test_defaults_and_clip_resolution() -> None:
    assert GMPOPolicyLossFn.default_args() == {
        "loss_agg_mode": "seq-mean-token-mean",
        "clip_range": None,
        "clip_range_low": None,
        "clip_range_high": None,
    }
    fn = GMPOPolicyLossFn()
    assert (fn.clip_range_low, fn.clip_range_high) == (0.4, 0.4)
    assert fn.select_keys == ["old_log_probs", "response_mask", "advantages"]
    fn = GMPOPolicyLossFn(clip_range=0.3, clip_range_low=0.1)
    assert (fn.clip_range_low, fn.clip_range_high) == (0.1, 0.3)


def test_golden_values() -> None:
    # Row 0 (A = +1): δ = 0.1, 0.6, -0.2 -> upper cut at 0.4: 0.1, 0.4, -0.2; mean 0.1; ρ0 = e^0.1.
    # Row 1 (A = -2): δ = -0.5, 0.2 -> lower cut at -0.4: -0.4, 0.2; mean -0.1; ρ1 = e^-0.1.
    # seq-mean-token-mean: L = (−1·ρ0 + 2·ρ1) / 2; ∂L/∂logπ_t = −A ρ / (n_b · 2) on uncut tokens.
    old = torch.full((2, 4), -1.0, dtype=torch.float64)
    delta = torch.tensor([[0.1, 0.6, -0.2, 5.0], [-0.5, 0.2, 5.0, 5.0]], dtype=torch.float64)
    x = {
        "log_prob": old + delta,
        "old_log_probs": old,
        "response_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool),
        "advantages": torch.tensor([[1.0], [-2.0]], dtype=torch.float64).expand(2, 4).clone(),
    }
    loss, metrics, grad = grad_of(GMPOPolicyLossFn(), x)
    r0, r1 = math.exp(0.1), math.exp(-0.1)
    assert float(loss) == pytest.approx((-r0 + 2 * r1) / 2, rel=1e-12)
    expected = torch.tensor(
        [[-r0 / 3 / 2, 0.0, -r0 / 3 / 2, 0.0], [0.0, 2 * r1 / 2 / 2, 0.0, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["pg_clipfrac"]) == pytest.approx(1 / 5)
    assert float(metrics["pg_clipfrac_lower"]) == pytest.approx(1 / 5)
    assert float(metrics["ppo_kl"]) == pytest.approx(-(0.1 + 0.6 - 0.2 - 0.5 + 0.2) / 5, rel=1e-12)
    assert float(metrics["geo_ratio_mean"]) == pytest.approx((r0 + r1) / 2, rel=1e-12)


def loop_loss(x: dict[str, torch.Tensor], lp: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """The GMPO objective written literally, one sequence and one token at a time (slow, independent)."""
    mask, old, adv = x["response_mask"], x["old_log_probs"], x["advantages"]
    losses = []
    for b in range(mask.shape[0]):
        tokens = [t for t in range(mask.shape[1]) if bool(mask[b, t])]
        if not tokens:
            continue
        a = sum(float(adv[b, t]) for t in tokens) / len(tokens)
        terms = []
        for t in tokens:
            d = lp[b, t] - old[b, t]
            if a > 0:
                terms.append(torch.clamp(d, max=hi))  # min(δ, clip(δ)) = min(δ, hi)
            elif a < 0:
                terms.append(torch.clamp(d, min=-lo))  # max(δ, clip(δ)) = max(δ, -lo)
            else:
                terms.append(d * 0)
        losses.append(-a * torch.exp(torch.stack(terms).mean()))
    return torch.stack(losses).mean()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), lo=st.floats(0.05, 0.6), hi=st.floats(0.05, 0.6))
def test_matches_a_literal_per_token_loop(seed: int, lo: float, hi: float) -> None:
    x = loss_inputs(seed, b=4, t=6, spread=0.5)
    loss, _, grad = grad_of(GMPOPolicyLossFn(clip_range_low=lo, clip_range_high=hi), x)
    lp = x["log_prob"].clone().requires_grad_(True)
    expected = loop_loss(x, lp, lo, hi)
    expected.backward()
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, lp.grad, rtol=1e-12, atol=1e-14)


def test_token_mean_weights_each_sequence_by_its_length() -> None:
    x = loss_inputs(5)
    seq_loss, metrics, _ = grad_of(GMPOPolicyLossFn(loss_agg_mode="token-mean"), x)
    mask = x["response_mask"]
    n = mask.sum(-1).double()
    per_seq, _, _ = grad_of(GMPOPolicyLossFn(loss_agg_mode="seq-mean-token-sum"), x)
    # seq-mean-token-sum = Σ_b n_b ℓ_b / N_seq and token-mean = Σ_b n_b ℓ_b / N_tok.
    assert float(seq_loss) == pytest.approx(float(per_seq) * len(n) / float(n.sum()), rel=1e-12)
    assert float(metrics["pg_loss"]) == float(seq_loss)


def test_zero_advantage_and_overflow() -> None:
    # Row 0: A = 0 -> no loss, no gradient. Row 1: A < 0 and δ = 100 (no upper cut for A < 0): the log
    # geometric mean is clamped at 20, so the loss is finite and the row gets no gradient.
    x = {
        "log_prob": torch.tensor([[0.3, -0.3], [100.0, 100.0]]),
        "old_log_probs": torch.zeros(2, 2),
        "response_mask": torch.ones(2, 2, dtype=torch.bool),
        "advantages": torch.tensor([[0.0], [-1.0]]).expand(2, 2),
    }
    loss, metrics, grad = grad_of(GMPOPolicyLossFn(), x)
    assert float(loss) == pytest.approx(math.exp(20.0) / 2, rel=1e-6)
    assert torch.equal(grad, torch.zeros(2, 2))
    assert all(bool(torch.isfinite(v)) for v in metrics.values())


@pytest.mark.parametrize("seed", [0, 1])
def test_nan_at_masked_positions_leaks_nowhere(seed: int) -> None:
    assert_nan_at_masked_positions_leaks_nowhere(GMPOPolicyLossFn(), loss_inputs(seed, spread=0.5))


def test_metrics_are_detached_zero_dim_tensors_without_host_sync() -> None:
    assert_no_host_sync_and_detached_metrics(GMPOPolicyLossFn(), loss_inputs(0), METRIC_KEYS)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(mode: str) -> None:
    assert_micro_batch_invariant(
        GMPOPolicyLossFn(loss_agg_mode=mode), loss_inputs(7, b=6, spread=0.5, empty_rows=True)
    )
