"""``gpg``: golden values by hand, gradient, masking, host syncs, micro-batch invariance."""

from __future__ import annotations

import pytest
import torch
from peer_losses_support import (
    AGG_MODES,
    agg_denominator,
    assert_micro_batch_invariant,
    assert_nan_at_masked_positions_leaks_nowhere,
    assert_no_host_sync_and_detached_metrics,
    grad_of,
    loss_inputs,
)
from trinity_plugin_peer_losses import GPGPolicyLossFn

from trinity_core.ops import global_normalizers

# ℓ = −A·logπ per token. Row 0: A = 2, logπ = (−1, −2, [masked]) → ℓ = (2, 4).
# Row 1: A = −1, logπ = (−0.25, −4, −1) → ℓ = (−0.25, −4, −1).
#   token-mean          = (2 + 4 − 0.25 − 4 − 1) / 5 = 0.75 / 5 = 0.15
#   seq-mean-token-mean = (6/2 + (−5.25)/3) / 2 = (3 − 1.75) / 2 = 0.625
#   seq-mean-token-sum  = (6 − 5.25) / 2 = 0.375
GOLDEN = {"token-mean": 0.15, "seq-mean-token-mean": 0.625, "seq-mean-token-sum": 0.375}


def golden_inputs() -> dict[str, torch.Tensor]:
    return {
        "log_prob": torch.tensor([[-1.0, -2.0, -0.5], [-0.25, -4.0, -1.0]], dtype=torch.float64),
        "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
        "advantages": torch.tensor([[2.0], [-1.0]], dtype=torch.float64),
    }


@pytest.mark.parametrize("mode", sorted(GOLDEN))
def test_golden_values(mode: str) -> None:
    loss, metrics, _ = grad_of(GPGPolicyLossFn(loss_agg_mode=mode), golden_inputs())
    assert loss.item() == pytest.approx(GOLDEN[mode], abs=1e-12)
    assert metrics["gpg_loss"].item() == pytest.approx(GOLDEN[mode], abs=1e-12)


def test_gradient_is_minus_advantage_over_token_count() -> None:
    # token-mean over 5 tokens: ∂L/∂logπ = −A/5 on selected tokens, 0 on the masked one.
    _, _, grad = grad_of(GPGPolicyLossFn(), golden_inputs())
    expected = torch.tensor([[-0.4, -0.4, 0.0], [0.2, 0.2, 0.2]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_gradient_matches_formula_on_random_inputs(mode: str) -> None:
    x = loss_inputs(3)
    mask = x["response_mask"]
    extra: dict = {}
    if mode == "seq-mean-token-sum-norm":
        extra = {"loss_scale": global_normalizers(mask, max_tokens=16)}
    _, _, grad = grad_of(GPGPolicyLossFn(loss_agg_mode=mode), x, **extra)
    expected = torch.where(mask, -x["advantages"] / agg_denominator(mask, mode, 16), 0.0)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)


def test_needs_no_old_log_probs() -> None:
    assert GPGPolicyLossFn().select_keys == ["response_mask", "advantages"]
    assert GPGPolicyLossFn(backend="tinker").select_keys == ["action_mask", "advantages"]


def test_masked_positions_leak_nowhere() -> None:
    assert_nan_at_masked_positions_leaks_nowhere(GPGPolicyLossFn(), loss_inputs(1))


def test_no_host_sync_and_detached_metrics() -> None:
    assert_no_host_sync_and_detached_metrics(GPGPolicyLossFn(), loss_inputs(2), {"gpg_loss"})


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batch_invariant(mode: str) -> None:
    assert GPGPolicyLossFn.microbatch_invariant
    assert_micro_batch_invariant(GPGPolicyLossFn(loss_agg_mode=mode), loss_inputs(4, empty_rows=True))
