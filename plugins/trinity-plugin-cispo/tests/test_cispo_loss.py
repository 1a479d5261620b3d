"""The ``cispo`` policy loss: clipped, stop-gradient IS weight; optional PPO-style token mask."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from cispo_support import (
    AGG_MODES,
    agg_denominator,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_cispo import CISPOPolicyLossFn

METRIC_KEYS = {"cispo_loss", "ppo_kl", "unmasked_frac"}


def test_defaults_and_keys() -> None:
    assert CISPOPolicyLossFn.default_args() == {
        "loss_agg_mode": "token-mean",
        "clip_range_low": 1.0,
        "clip_range_high": 0.28,
        "enable_mask_clip": False,
        "mask_clip_range_low": 1.0,
        "mask_clip_range_high": 0.28,
    }
    assert CISPOPolicyLossFn().select_keys == ["old_log_probs", "response_mask", "advantages"]
    with pytest.raises(pydantic.ValidationError, match="clip_range_high"):
        CISPOPolicyLossFn(clip_range_high=-1.0)


def golden_batch() -> dict[str, torch.Tensor]:
    # One row, five selected tokens and one padding token.
    old = torch.tensor([[-1.0, -2.0, -1.5, -0.5, -1.0, -1.0]], dtype=torch.float64)
    ratio = torch.tensor([[2.0, 1.1, 0.3, 1.5, 0.05, 9.0]], dtype=torch.float64)
    return {
        "log_prob": old + torch.log(ratio),
        "old_log_probs": old,
        "response_mask": torch.tensor([[1, 1, 1, 1, 1, 0]], dtype=torch.bool),
        "advantages": torch.tensor([[1.0, 1.0, -1.0, -2.0, -1.0, 1.0]], dtype=torch.float64),
    }


def test_golden_values_without_mask_clip() -> None:
    # w = clip(r, 0, 1.28): 1.28, 1.1, 0.3, 1.28, 0.05; ℓ = −A w logπ; ∂L/∂logπ = −A w / 5.
    x = golden_batch()
    loss, metrics, grad = grad_of(CISPOPolicyLossFn(), x)
    w = [1.28, 1.1, 0.3, 1.28, 0.05]
    a = [1.0, 1.0, -1.0, -2.0, -1.0]
    lp = x["log_prob"][0].tolist()
    assert float(loss) == pytest.approx(-sum(a[i] * w[i] * lp[i] for i in range(5)) / 5, rel=1e-12)
    expected = torch.tensor([[-a[i] * w[i] / 5 for i in range(5)] + [0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["unmasked_frac"]) == 1.0
    r = [2.0, 1.1, 0.3, 1.5, 0.05]
    assert float(metrics["ppo_kl"]) == pytest.approx(-sum(math.log(v) for v in r) / 5, rel=1e-12)


def test_golden_values_with_mask_clip() -> None:
    # mask_clip 0.5 / 0.28: token 0 (r = 2 > 1.28, A > 0) and token 4 (r = 0.05 < 0.5, A < 0) are dropped;
    # token 2 (r = 0.3 < 0.5, A < 0) too; token 3 (r = 1.5 but A < 0) is kept. clip_range_low 0.8: w >= 0.2.
    x = golden_batch()
    fn = CISPOPolicyLossFn(clip_range_low=0.8, enable_mask_clip=True, mask_clip_range_low=0.5)
    loss, metrics, grad = grad_of(fn, x)
    keep = [0.0, 1.0, 0.0, 1.0, 0.0]
    w = [1.28, 1.1, 0.3, 1.28, 0.2]
    a = [1.0, 1.0, -1.0, -2.0, -1.0]
    expected = torch.tensor([[-a[i] * w[i] * keep[i] / 5 for i in range(5)] + [0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["unmasked_frac"]) == pytest.approx(2 / 5)
    lp = x["log_prob"][0].tolist()
    assert float(loss) == pytest.approx(-sum(a[i] * w[i] * keep[i] * lp[i] for i in range(5)) / 5)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(AGG_MODES[:3]),
    bounds=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
    enable=st.booleans(),
)
def test_autograd_equals_the_analytic_gradient(
    seed: int, mode: str, bounds: tuple[float, float, float, float], enable: bool
) -> None:
    lo, hi, mlo, mhi = bounds
    x = loss_inputs(seed, spread=0.8)
    fn = CISPOPolicyLossFn(
        clip_range_low=lo,
        clip_range_high=hi,
        enable_mask_clip=enable,
        mask_clip_range_low=mlo,
        mask_clip_range_high=mhi,
        loss_agg_mode=mode,
    )
    _, _, grad = grad_of(fn, x)
    mask, adv = x["response_mask"], x["advantages"]
    r = torch.exp(x["log_prob"] - x["old_log_probs"])
    w = r.clamp(1 - lo, 1 + hi)
    drop = ((r > 1 + mhi) & (adv > 0)) | ((r < 1 - mlo) & (adv < 0))
    keep = (~drop).double() if enable else torch.ones_like(r)
    expected = torch.where(mask, -adv * w * keep / agg_denominator(mask, mode), 0.0)
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)


def test_ratio_is_clamped_against_overflow() -> None:
    x = {
        "log_prob": torch.tensor([[-0.1, -0.2]]),
        "old_log_probs": torch.tensor([[-200.0, 200.0]]),
        "response_mask": torch.ones(1, 2, dtype=torch.bool),
        "advantages": torch.tensor([[1.0, -1.0]]),
    }
    loss, metrics, grad = grad_of(CISPOPolicyLossFn(enable_mask_clip=True), x)
    assert torch.isfinite(loss)
    assert bool(torch.isfinite(grad).all())
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    # Token 0: r = e^20 > 1.28 with A > 0 -> masked; token 1: r = e^-20 with A < 0, mask_clip_low 1 -> kept,
    # weight e^-20 (no lower bound).
    torch.testing.assert_close(grad, torch.tensor([[0.0, math.exp(-20.0) / 2]]), rtol=1e-5, atol=0.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_nan_at_masked_positions_leaks_nowhere(seed: int) -> None:
    fn = CISPOPolicyLossFn(enable_mask_clip=True, mask_clip_range_low=0.2)
    assert_nan_at_masked_positions_leaks_nowhere(fn, loss_inputs(seed, spread=0.8))


def test_metrics_are_detached_zero_dim_tensors_without_host_sync() -> None:
    assert_no_host_sync_and_detached_metrics(
        CISPOPolicyLossFn(enable_mask_clip=True), loss_inputs(0), METRIC_KEYS
    )


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(mode: str) -> None:
    fn = CISPOPolicyLossFn(enable_mask_clip=True, loss_agg_mode=mode)
    assert_micro_batch_invariant(fn, loss_inputs(4, b=6, spread=0.8, empty_rows=True))
