"""The ``gspo`` policy loss: sequence ratio, clipping, clamp, defaults, masking, normalizers."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from gspo_support import (
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
from trinity_plugin_gspo import GSPOLossFn
from trinity_plugin_gspo.policy_loss import SEQ_LOG_RATIO_MAX

METRIC_KEYS = {"pg_clipfrac", "ppo_kl", "pg_loss", "ppo_kl_seq"}


def test_defaults_keys_and_clip_resolution() -> None:
    assert GSPOLossFn.default_args() == {
        "loss_agg_mode": "seq-mean-token-mean",
        "clip_range": None,
        "clip_range_low": None,
        "clip_range_high": None,
    }
    fn = GSPOLossFn()
    assert (fn.clip_range_low, fn.clip_range_high) == (3e-4, 4e-4)
    assert fn.loss_agg_mode == "seq-mean-token-mean"
    assert fn.select_keys == ["old_log_probs", "response_mask", "advantages"]
    assert GSPOLossFn(backend="tinker").select_keys == ["old_logprob", "action_mask", "advantages"]
    sym = GSPOLossFn(clip_range=0.2)
    assert (sym.clip_range_low, sym.clip_range_high) == (0.2, 0.2)
    one_side = GSPOLossFn(clip_range=0.2, clip_range_high=0.3)
    assert (one_side.clip_range_low, one_side.clip_range_high) == (0.2, 0.3)
    only_low = GSPOLossFn(clip_range_low=1e-3)
    assert (only_low.clip_range_low, only_low.clip_range_high) == (1e-3, 4e-4)
    with pytest.raises(pydantic.ValidationError, match="clip_range_low"):
        GSPOLossFn(clip_range_low=-0.1)
    with pytest.raises(pydantic.ValidationError, match="loss_agg_mode"):
        GSPOLossFn(loss_agg_mode="sum")


def golden_batch() -> dict[str, torch.Tensor]:
    # Row 0: δ = 0.1, 0.3 (mean 0.2), A = +1.   Row 1: δ = -0.2, -0.4, -0.6 (mean -0.4), A = -2.
    # Row 2: δ = 0.05, -0.05, 0.12 (mean 0.04), A = 0.5.  Position 3 is padding everywhere.
    old = torch.tensor([[-1.0, -2.0, -0.5, -0.3]] * 3, dtype=torch.float64)
    delta = torch.tensor(
        [[0.1, 0.3, 0.0, 9.0], [-0.2, -0.4, -0.6, 9.0], [0.05, -0.05, 0.12, 9.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    adv = torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64).expand(3, 4).clone()
    return {"log_prob": old + delta, "old_log_probs": old, "response_mask": mask, "advantages": adv}


def test_golden_values_seq_mean_token_mean() -> None:
    # clip 0.2: s0 = e^0.2 = 1.221 > 1.2 with A > 0 -> clipped, ℓ = -1.2, no gradient;
    # s1 = e^-0.4 = 0.670 < 0.8 with A < 0 -> clipped, ℓ = 2 · 0.8 = 1.6, no gradient;
    # s2 = e^0.04 inside the band -> ℓ = -0.5 e^0.04, gradient -A s2 / (n_2 · N_seq) = -0.5 e^0.04 / 9.
    fn = GSPOLossFn(clip_range=0.2)
    loss, metrics, grad = grad_of(fn, golden_batch())
    s2 = math.exp(0.04)
    assert float(loss) == pytest.approx((-1.2 + 1.6 - 0.5 * s2) / 3, rel=1e-12)
    expected = torch.zeros(3, 4, dtype=torch.float64)
    expected[2, :3] = -0.5 * s2 / 9
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["pg_clipfrac"]) == pytest.approx(5 / 8)
    assert float(metrics["ppo_kl"]) == pytest.approx(-(0.4 - 1.2 + 0.12) / 8, rel=1e-12)
    assert float(metrics["ppo_kl_seq"]) == pytest.approx(-(0.2 - 0.4 + 0.04) / 3, rel=1e-12)
    assert float(metrics["pg_loss"]) == float(loss)


def test_golden_values_token_mean_unclipped() -> None:
    # Wide clip: nothing clipped. token-mean over 8 tokens: ℓ_t = -A_b s_b, ∂/∂logπ_t = -A_b s_b / 8.
    fn = GSPOLossFn(clip_range=0.9, loss_agg_mode="token-mean")
    loss, metrics, grad = grad_of(fn, golden_batch())
    s = [math.exp(0.2), math.exp(-0.4), math.exp(0.04)]
    a = [1.0, -2.0, 0.5]
    n = [2, 3, 3]
    assert float(loss) == pytest.approx(sum(-ai * si * ni for ai, si, ni in zip(a, s, n, strict=True)) / 8)
    expected = torch.zeros(3, 4, dtype=torch.float64)
    for row in range(3):
        expected[row, : n[row]] = -a[row] * s[row] / 8
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["pg_clipfrac"]) == 0.0


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(AGG_MODES[:3]),
    clip=st.tuples(st.floats(0.0, 0.5), st.floats(0.0, 0.5)),
)
def test_autograd_equals_the_analytic_gradient(seed: int, mode: str, clip: tuple[float, float]) -> None:
    x = loss_inputs(seed, spread=0.2)
    fn = GSPOLossFn(clip_range_low=clip[0], clip_range_high=clip[1], loss_agg_mode=mode)
    _, _, grad = grad_of(fn, x)
    mask, adv = x["response_mask"], x["advantages"]
    delta = torch.where(mask, x["log_prob"] - x["old_log_probs"], 0.0)
    s = torch.exp(delta.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True))
    clipped_active = torch.where(adv > 0, s > 1 + clip[1], s < 1 - clip[0])
    expected = torch.where(mask & ~clipped_active, -adv * s / agg_denominator(mask, mode), 0.0)
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)


def test_sequence_log_ratio_is_clamped_against_overflow() -> None:
    # Row 0: δ̄ = 50 (would give e^50 · A and, in float32, inf for δ̄ > 88); row 1: δ̄ = -800 (s -> 0).
    lp = torch.tensor([[50.0, 50.0], [-800.0, -800.0], [0.1, -0.1]])
    x = {
        "log_prob": lp,
        "old_log_probs": torch.zeros(3, 2),
        "response_mask": torch.ones(3, 2, dtype=torch.bool),
        "advantages": torch.tensor([[-1.0], [1.0], [1.0]]).expand(3, 2),
    }
    loss, metrics, grad = grad_of(GSPOLossFn(clip_range=0.2, loss_agg_mode="token-mean"), x)
    assert torch.isfinite(loss)
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    # Row 0 (A < 0, unclipped branch active) is capped at e^10 and, beyond the cap, gets no gradient;
    # row 1 (A > 0, s = 0 < 1 - ε: the pessimistic max picks the unclipped -A·s = 0); row 2: s = 1.
    assert float(loss) == pytest.approx((2 * math.exp(SEQ_LOG_RATIO_MAX) + 0.0 - 2 * 1.0) / 6, rel=1e-5)
    assert torch.equal(grad[0], torch.zeros(2))
    assert torch.equal(grad[1], torch.zeros(2))
    torch.testing.assert_close(grad[2], torch.full((2,), -1.0 / 6))


def test_own_mode_is_used_unless_none_then_the_trainer_mode() -> None:
    x = loss_inputs(3)
    fixed = GSPOLossFn(clip_range=0.2)
    token = GSPOLossFn(clip_range=0.2, loss_agg_mode="token-mean")
    follows = GSPOLossFn(clip_range=0.2, loss_agg_mode=None)
    seq_loss, _, _ = grad_of(fixed, x, loss_agg_mode="token-mean")  # its own mode wins
    assert torch.equal(seq_loss, grad_of(fixed, x)[0])
    token_loss, _, _ = grad_of(token, x)
    assert not torch.allclose(seq_loss, token_loss)
    assert torch.equal(grad_of(follows, x, loss_agg_mode="token-mean")[0], token_loss)
    assert torch.equal(grad_of(follows, x, loss_agg_mode="seq-mean-token-mean")[0], seq_loss)


@pytest.mark.parametrize("seed", [0, 1])
def test_nan_at_masked_positions_leaks_nowhere(seed: int) -> None:
    assert_nan_at_masked_positions_leaks_nowhere(GSPOLossFn(clip_range=0.1), loss_inputs(seed))


def test_metrics_are_detached_zero_dim_tensors_without_host_sync() -> None:
    assert_no_host_sync_and_detached_metrics(GSPOLossFn(), loss_inputs(0), METRIC_KEYS)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(mode: str) -> None:
    assert_micro_batch_invariant(
        GSPOLossFn(clip_range=0.1, loss_agg_mode=mode), loss_inputs(4, b=6, empty_rows=True)
    )


def test_low_precision_inputs_compute_in_float32() -> None:
    lp = torch.full((2, 3), -0.5, dtype=torch.bfloat16, requires_grad=True)
    loss, metrics = GSPOLossFn()(
        lp, old_logprob=lp.detach(), action_mask=torch.ones(2, 3), advantages=torch.ones(2, 3)
    )
    loss.backward()
    assert loss.dtype == torch.float32
    assert lp.grad is not None
    assert lp.grad.dtype == torch.bfloat16
    assert float(loss.detach()) == pytest.approx(-1.0)
    assert float(metrics["pg_clipfrac"]) == 0.0
