"""``clip_cov``: golden values by hand, deterministic selection, what is and is not micro-batch invariant."""

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
from trinity_plugin_peer_losses import ClipCovPolicyLossFn

from trinity_core.ops import global_normalizers

KEYS = {"clip_cov_loss", "ppo_kl", "pg_clipfrac", "cov_clipfrac"}


def golden_inputs(old_shift: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)) -> dict[str, torch.Tensor]:
    """One row of four selected tokens plus a masked one; A = (2, 0, 0, −2), logπ = (−1, −3, −3, −5.5).

    Covariance by hand (means 0 and −3.125): c = (4.25, 0, 0, 4.75). ``old_shift`` = logπ − logπ_old.
    """
    lp = torch.tensor([[-1.0, -3.0, -3.0, -5.5, -0.3]], dtype=torch.float64)
    shift = torch.tensor([[*old_shift, 0.0]], dtype=torch.float64)
    return {
        "log_prob": lp,
        "old_log_probs": lp - shift,
        "response_mask": torch.tensor([[True, True, True, True, False]]),
        "advantages": torch.tensor([[2.0, 0.0, 0.0, -2.0, 7.0]], dtype=torch.float64),
    }


def test_cuts_the_top_covariance_token() -> None:
    # r = 1 everywhere, so PPO gives ℓ = −A = (−2, 0, 0, 2) and clips nothing. n = 4, ratio 0.25 → k = 1:
    # both 4.25 and 4.75 lie in (1, 5); the larger, token 3, is cut. L = (−2 + 0 + 0 + 0)/4 = −0.5,
    # ∂L/∂logπ = −A·r/4 on kept tokens = (−0.5, 0, 0, 0).
    loss, metrics, grad = grad_of(ClipCovPolicyLossFn(clip_cov_ratio=0.25), golden_inputs())
    assert loss.item() == pytest.approx(-0.5)
    torch.testing.assert_close(grad, torch.tensor([[-0.5, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64))
    assert metrics["cov_clipfrac"].item() == pytest.approx(0.25)
    assert metrics["pg_clipfrac"].item() == 0.0


def test_window_bounds_are_strict_and_exclude_large_covariance() -> None:
    # ub = 4.5 excludes token 3 (4.75); token 0 (4.25) is cut instead: L = (0 + 0 + 0 + 2)/4 = 0.5.
    loss, _, grad = grad_of(ClipCovPolicyLossFn(clip_cov_ratio=0.25, clip_cov_ub=4.5), golden_inputs())
    assert loss.item() == pytest.approx(0.5)
    assert grad[0, 0].item() == 0.0
    # lb = 4.75 excludes both (strict): nothing is cut and the loss is PPO's, (−2 + 2)/4 = 0.
    loss, metrics, _ = grad_of(ClipCovPolicyLossFn(clip_cov_ratio=0.25, clip_cov_lb=4.75), golden_inputs())
    assert loss.item() == pytest.approx(0.0)
    assert metrics["cov_clipfrac"].item() == 0.0


def test_k_larger_than_the_candidates_cuts_all_of_them() -> None:
    # ratio 1 → k = 4 but only tokens 0 and 3 are candidates (c = 0 is not above lb = 1): L = 0, grad 0.
    loss, metrics, grad = grad_of(ClipCovPolicyLossFn(clip_cov_ratio=1.0), golden_inputs())
    assert loss.item() == 0.0
    assert not bool(grad.any())
    assert metrics["cov_clipfrac"].item() == pytest.approx(0.5)


def test_ppo_clipped_tokens_are_not_candidates() -> None:
    # Token 3 moved: logπ − logπ_old = −0.5, r = e^−0.5 = 0.6065 < 0.8 with A = −2 < 0, so PPO clips it
    # (−A·clip(r) = 1.6 > −A·r = 1.2131). It cannot be cut; token 0 is: L = (0 + 0 + 0 + 1.6)/4 = 0.4.
    loss, metrics, grad = grad_of(ClipCovPolicyLossFn(clip_cov_ratio=0.25), golden_inputs((0, 0, 0, -0.5)))
    assert loss.item() == pytest.approx(0.4)
    assert grad[0, 0].item() == 0.0
    assert grad[0, 3].item() == 0.0  # clipped by PPO: constant in logπ
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.25)
    assert metrics["cov_clipfrac"].item() == pytest.approx(0.25)


def test_ties_are_cut_in_position_order() -> None:
    # Two identical rows: every covariance appears twice. k = 1 (8 tokens · 0.2 = 1.6) cuts the first copy.
    x = golden_inputs()
    x = {k: torch.cat([v, v]) for k, v in x.items()}
    _, _, grad = grad_of(ClipCovPolicyLossFn(clip_cov_ratio=0.2), x)
    assert grad[0, 3].item() == 0.0
    assert grad[1, 3].item() == pytest.approx(2 / 8)


def test_asymmetric_clip_range() -> None:
    # clip_range_low = 0.5 widens the lower bound to 0.5: token 3 (r = 0.6065) is no longer PPO-clipped.
    fn = ClipCovPolicyLossFn(clip_cov_ratio=0.25, clip_range_low=0.5)
    _, metrics, _ = grad_of(fn, golden_inputs((0, 0, 0, -0.5)))
    assert metrics["pg_clipfrac"].item() == 0.0


def test_stale_ratio_is_clamped() -> None:
    x = golden_inputs((40.0, 0.0, 0.0, 0.0))
    loss, metrics, grad = grad_of(ClipCovPolicyLossFn(), x)
    assert torch.isfinite(loss)
    assert bool(torch.isfinite(grad).all())
    assert metrics["ppo_kl"].item() == pytest.approx(-20 / 4)


def test_validation() -> None:
    with pytest.raises(pydantic.ValidationError, match="clip_cov_lb"):
        ClipCovPolicyLossFn(clip_cov_lb=5.0, clip_cov_ub=5.0)
    with pytest.raises(pydantic.ValidationError, match="clip_cov_ratio"):
        ClipCovPolicyLossFn(clip_cov_ratio=0.0)
    with pytest.raises(pydantic.ValidationError, match="clip_cov_ratio"):
        ClipCovPolicyLossFn(clip_cov_ratio=1.5)


def test_masked_positions_leak_nowhere() -> None:
    # A wide window and a large ratio so that tokens are actually cut.
    fn = ClipCovPolicyLossFn(clip_cov_ratio=0.3, clip_cov_lb=-10.0, clip_cov_ub=10.0)
    x = loss_inputs(1)
    assert grad_of(fn, x)[1]["cov_clipfrac"].item() > 0
    assert_nan_at_masked_positions_leaks_nowhere(fn, x)


def test_no_host_sync_and_detached_metrics() -> None:
    fn = ClipCovPolicyLossFn(clip_cov_ratio=0.3, clip_cov_lb=-10.0, clip_cov_ub=10.0)
    assert_no_host_sync_and_detached_metrics(fn, loss_inputs(2), KEYS)


def test_declares_not_micro_batch_invariant_and_is_not() -> None:
    # Selection is per micro-batch: an uneven split changes which tokens are cut, hence the loss.
    assert ClipCovPolicyLossFn.microbatch_invariant is False
    fn = ClipCovPolicyLossFn(clip_cov_ratio=0.2, clip_cov_lb=-10.0, clip_cov_ub=10.0)
    x = loss_inputs(5)
    full, _, total, _ = split_losses(fn, x, three_parts(6))
    assert not math.isclose(full.item(), total.item(), rel_tol=1e-6)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_invariant_when_no_token_is_a_candidate(mode: str) -> None:
    # An empty window: nothing is cut, the loss is PPO's and aggregates exactly like it.
    fn = ClipCovPolicyLossFn(loss_agg_mode=mode, clip_cov_lb=1e6, clip_cov_ub=2e6)
    assert_micro_batch_invariant(fn, loss_inputs(4, empty_rows=True))


@pytest.mark.parametrize("mode", AGG_MODES)
def test_invariant_for_micro_batches_with_the_batch_statistics(mode: str) -> None:
    # Two identical micro-batches of 8 tokens each: each call sees the batch's means, and
    # k = 0.25·8 = 2 per call adds up to the full batch's 0.25·16 = 4 (both copies of the same 2 tokens).
    half = loss_inputs(7, b=3, t=4)
    half["response_mask"] = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    x = {k: torch.cat([v, v]) for k, v in half.items()}
    fn = ClipCovPolicyLossFn(loss_agg_mode=mode, clip_cov_ratio=0.25, clip_cov_lb=-10.0, clip_cov_ub=10.0)
    full, full_grad, total, grad = split_losses(fn, x, [slice(0, 3), slice(3, 6)])
    scale = global_normalizers(x["response_mask"], max_tokens=4)
    assert grad_of(fn, x, loss_scale=scale)[1]["cov_clipfrac"].item() == pytest.approx(4 / 16)
    torch.testing.assert_close(total, full, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, full_grad, rtol=1e-12, atol=1e-14)


def test_selection_is_local_and_aggregation_uses_the_global_normalizers() -> None:
    # The same micro-batch with and without loss_scale: identical selection (same tokens with zero
    # gradient) and, for token-mean, loss·N_global equals the local sum = loss_local·N_local.
    x = loss_inputs(8)
    fn = ClipCovPolicyLossFn(clip_cov_ratio=0.2, clip_cov_lb=-10.0, clip_cov_ub=10.0)
    mask = x["response_mask"]
    n_local = int(mask.sum())
    bigger = torch.cat([mask, torch.ones_like(mask)])
    scale = global_normalizers(bigger)
    local_loss, _, local_grad = grad_of(fn, x)
    global_loss, _, global_grad = grad_of(fn, x, loss_scale=scale)
    n_global = int(scale.num_tokens)
    assert (local_grad == 0).equal(global_grad == 0)
    torch.testing.assert_close(global_loss * n_global, local_loss * n_local, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(global_grad * n_global, local_grad * n_local, rtol=1e-12, atol=1e-14)
