"""``kl_cov``: golden values by hand, deterministic selection, what is and is not micro-batch invariant."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from peer_losses_support import (
    AGG_MODES,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
    split_losses,
    three_parts,
)
from trinity_plugin_peer_losses import KLCovPolicyLossFn

from trinity_core.ops import global_normalizers

KEYS = {"kl_cov_loss", "ppo_kl", "ppo_kl_abs", "kl_cov_frac"}
DELTA = (0.1, -0.2, 0.3, -0.4)


def golden_inputs() -> dict[str, torch.Tensor]:
    """A = (2, 0, 0, −2), logπ = (−1, −3, −3, −5.5) (covariance (4.25, 0, 0, 4.75)), δ = ``DELTA``."""
    lp = torch.tensor([[-1.0, -3.0, -3.0, -5.5, -0.3]], dtype=torch.float64)
    return {
        "log_prob": lp,
        "old_log_probs": lp - torch.tensor([[*DELTA, 0.0]], dtype=torch.float64),
        "response_mask": torch.tensor([[True, True, True, True, False]]),
        "advantages": torch.tensor([[2.0, 0.0, 0.0, -2.0, 7.0]], dtype=torch.float64),
    }


def test_penalises_the_top_covariance_token() -> None:
    # k = max(floor(0.25·4), 1) = 1: token 3 (c = 4.75). β = 0.5.
    #   ℓ = (−2e^0.1, 0, 0, 2e^−0.4 + 0.5·0.4),  L = Σℓ / 4
    #   ∂ℓ/∂logπ = (−2e^0.1, 0, 0, 2e^−0.4 + 0.5·sign(−0.4)) / 4
    loss, metrics, grad = grad_of(KLCovPolicyLossFn(kl_cov_ratio=0.25, ppo_kl_coef=0.5), golden_inputs())
    e1, e4 = math.exp(0.1), math.exp(-0.4)
    assert loss.item() == pytest.approx((-2 * e1 + 2 * e4 + 0.2) / 4, abs=1e-12)
    expected = torch.tensor([[-2 * e1 / 4, 0.0, 0.0, (2 * e4 - 0.5) / 4, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert metrics["kl_cov_frac"].item() == pytest.approx(0.25)
    assert metrics["ppo_kl"].item() == pytest.approx(0.05)  # −mean(δ) = −(−0.2)/4
    assert metrics["ppo_kl_abs"].item() == pytest.approx(0.25)  # mean |δ| = 1.0/4


def test_k_two_penalises_both_large_covariances_and_no_clipping() -> None:
    # ratio 0.5 → k = 2: tokens 0 and 3. No PPO clip: token 0's r = e^0.1 stays unclipped.
    loss, _, grad = grad_of(KLCovPolicyLossFn(kl_cov_ratio=0.5), golden_inputs())
    e1, e4 = math.exp(0.1), math.exp(-0.4)
    assert loss.item() == pytest.approx((-2 * e1 + 0.1 + 2 * e4 + 0.4) / 4, abs=1e-12)
    assert grad[0, 0].item() == pytest.approx((-2 * e1 + 1.0) / 4)


def test_penalty_uses_the_unclamped_log_ratio() -> None:
    # δ = 30: the ratio is clamped to e^20 (a constant: no gradient beyond the clamp), but the penalty is
    # β·30 and keeps its gradient β·sign(δ) = β, so the token is still pulled back: ∂L/∂logπ = 0.5/2.
    lp = torch.tensor([[-0.5, -1.0]], dtype=torch.float64)
    x = {
        "log_prob": lp,
        "old_log_probs": lp - torch.tensor([[30.0, 0.0]], dtype=torch.float64),
        "response_mask": torch.tensor([[True, True]]),
        "advantages": torch.tensor([[1.0, 0.0]], dtype=torch.float64),
    }
    loss, _, grad = grad_of(KLCovPolicyLossFn(kl_cov_ratio=0.5, ppo_kl_coef=0.5), x)
    assert loss.item() == pytest.approx((-math.exp(20.0) + 15.0) / 2, rel=1e-12)
    assert grad[0, 0].item() == pytest.approx(0.25, rel=1e-12)


def test_ties_are_penalised_in_position_order() -> None:
    x = golden_inputs()
    x = {k: torch.cat([v, v]) for k, v in x.items()}
    _, _, grad = grad_of(KLCovPolicyLossFn(kl_cov_ratio=0.2), x)
    # k = 1 of 8: the first copy of token 3 carries the penalty gradient (β·sign(−0.4) = −1), the second not.
    assert grad[0, 3].item() == pytest.approx((2 * math.exp(-0.4) - 1) / 8)
    assert grad[1, 3].item() == pytest.approx(2 * math.exp(-0.4) / 8)


def test_validation() -> None:
    with pytest.raises(pydantic.ValidationError, match="kl_cov_ratio"):
        KLCovPolicyLossFn(kl_cov_ratio=0.0)
    with pytest.raises(pydantic.ValidationError, match="ppo_kl_coef"):
        KLCovPolicyLossFn(ppo_kl_coef=-0.1)


def test_masked_positions_leak_nowhere() -> None:
    fn = KLCovPolicyLossFn(kl_cov_ratio=0.3)
    x = loss_inputs(1)
    assert grad_of(fn, x)[1]["kl_cov_frac"].item() > 0
    assert_nan_at_masked_positions_leaks_nowhere(fn, x)


def test_no_host_sync_and_detached_metrics() -> None:
    assert_no_host_sync_and_detached_metrics(KLCovPolicyLossFn(kl_cov_ratio=0.3), loss_inputs(2), KEYS)


def test_declares_not_micro_batch_invariant_and_is_not() -> None:
    assert KLCovPolicyLossFn.microbatch_invariant is False
    full, _, total, _ = split_losses(KLCovPolicyLossFn(kl_cov_ratio=0.3), loss_inputs(5), three_parts(6))
    assert not math.isclose(full.item(), total.item(), rel_tol=1e-6)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_invariant_without_penalty(mode: str) -> None:
    # ppo_kl_coef = 0: the selection has no effect and the loss is agg(−A r).
    fn = KLCovPolicyLossFn(loss_agg_mode=mode, kl_cov_ratio=0.3, ppo_kl_coef=0.0)
    assert_micro_batch_invariant(fn, loss_inputs(4, empty_rows=True))


@pytest.mark.parametrize("mode", AGG_MODES)
def test_invariant_for_micro_batches_with_the_batch_statistics(mode: str) -> None:
    half = loss_inputs(7, b=3, t=4)
    half["response_mask"] = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    x = {k: torch.cat([v, v]) for k, v in half.items()}
    fn = KLCovPolicyLossFn(loss_agg_mode=mode, kl_cov_ratio=0.25)
    full, full_grad, total, grad = split_losses(fn, x, [slice(0, 3), slice(3, 6)])
    scale = global_normalizers(x["response_mask"], max_tokens=4)
    assert grad_of(fn, x, loss_scale=scale)[1]["kl_cov_frac"].item() == pytest.approx(4 / 16)
    torch.testing.assert_close(total, full, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, full_grad, rtol=1e-12, atol=1e-14)


def test_selection_is_local_and_aggregation_uses_the_global_normalizers() -> None:
    x = loss_inputs(8)
    fn = KLCovPolicyLossFn(kl_cov_ratio=0.3)
    mask = x["response_mask"]
    scale = global_normalizers(torch.cat([mask, torch.ones_like(mask)]))
    local_loss, local_metrics, local_grad = grad_of(fn, x)
    global_loss, global_metrics, global_grad = grad_of(fn, x, loss_scale=scale)
    n_local, n_global = int(mask.sum()), int(scale.num_tokens)
    assert torch.equal(local_metrics["kl_cov_frac"], global_metrics["kl_cov_frac"])
    torch.testing.assert_close(global_loss * n_global, local_loss * n_local, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(global_grad * n_global, local_grad * n_local, rtol=1e-12, atol=1e-14)
