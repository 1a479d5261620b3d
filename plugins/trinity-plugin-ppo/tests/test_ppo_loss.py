"""The ``ppo`` policy loss: golden values (asymmetric and dual clip), sequence masking, PG fallback,
defaults, masking, host syncs and micro-batch invariance."""

from __future__ import annotations

import math
import re

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ppo_support import grad_of, loss_inputs
from trinity_plugin_ppo import DEFAULT_CLIP_RANGE, PPOPolicyLossFn

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs

# One row, lo = 0.2, hi = 0.3, c = 3, old log-probs 0 so r = exp(log_prob). Per token, by hand:
#   r    A   ℓ1=-A·r  ℓ2=-A·clip(r,.8,1.3)  C1    -A·c  ℓ    clip? lower? ∂ℓ/∂logπ = -A·r when unclipped
#  1.5  +1   -1.5     -1.3                  -1.3   -3   -1.3  yes   no    0
#  0.5  +1   -0.5     -0.8                  -0.5   -3   -0.5  no    no    -0.5
#  1.2  -2    2.4      2.4                   2.4    6    2.4  no    no    2.4
#  0.5  -2    1.0      1.6                   1.6    6    1.6  yes   no    0
#  4.0  -1    4.0      1.3                   4.0    3    3.0  no    yes   0   (dual clip)
#  2.0  -1    2.0      1.3                   2.0    3    2.0  no    no    2.0
#  (a 7th token, r = 100, A = 5, is masked out)
GOLDEN_RATIOS = [1.5, 0.5, 1.2, 0.5, 4.0, 2.0, 100.0]
GOLDEN_ADV = [1.0, 1.0, -2.0, -2.0, -1.0, -1.0, 5.0]
GOLDEN_LOSS = (-1.3 - 0.5 + 2.4 + 1.6 + 3.0 + 2.0) / 6
GOLDEN_GRAD = [0.0, -0.5 / 6, 2.4 / 6, 0.0, 0.0, 2.0 / 6, 0.0]


def golden_inputs() -> dict[str, torch.Tensor]:
    return {
        "log_prob": torch.log(torch.tensor([GOLDEN_RATIOS], dtype=torch.float64)),
        "old_log_probs": torch.zeros(1, 7, dtype=torch.float64),
        "response_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 0]], dtype=torch.bool),
        "advantages": torch.tensor([GOLDEN_ADV], dtype=torch.float64),
    }


def test_golden_values_with_asymmetric_and_dual_clip() -> None:
    fn = PPOPolicyLossFn(clip_range_low=0.2, clip_range_high=0.3, clip_ratio_c=3.0)
    loss, metrics, grad = grad_of(fn, golden_inputs())
    assert float(loss) == pytest.approx(GOLDEN_LOSS, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([GOLDEN_GRAD], dtype=torch.float64), rtol=1e-12, atol=1e-15)
    assert float(metrics["pg_clipfrac"]) == pytest.approx(2 / 6)
    assert float(metrics["pg_clipfrac_lower"]) == pytest.approx(1 / 6)
    expected_kl = -sum(math.log(r) for r in GOLDEN_RATIOS[:6]) / 6
    assert float(metrics["ppo_kl"]) == pytest.approx(expected_kl, rel=1e-12)
    assert float(metrics["pg_loss"]) == pytest.approx(GOLDEN_LOSS, rel=1e-12)


def test_symmetric_clip_range_and_one_sided_overrides() -> None:
    # clip_range 0.3 with clip_range_low 0.2 is the same loss as the explicit asymmetric pair.
    a = PPOPolicyLossFn(clip_range=0.3, clip_range_low=0.2)
    b = PPOPolicyLossFn(clip_range_low=0.2, clip_range_high=0.3)
    assert (a.clip_range_low, a.clip_range_high) == (0.2, 0.3)
    assert float(grad_of(a, golden_inputs())[0]) == pytest.approx(GOLDEN_LOSS, rel=1e-12)
    assert float(grad_of(b, golden_inputs())[0]) == pytest.approx(GOLDEN_LOSS, rel=1e-12)
    # Symmetric 0.2: token 1 clips at 1.2 instead of 1.3 -> ℓ = -1.2; token 5: ℓ2 = 1.2, C1 = 4, dual 3.
    loss = grad_of(PPOPolicyLossFn(clip_range=0.2), golden_inputs())[0]
    assert float(loss) == pytest.approx((-1.2 - 0.5 + 2.4 + 1.6 + 3.0 + 2.0) / 6, rel=1e-12)


def test_bare_ppo_resolves_clip_range_to_the_documented_default() -> None:
    fn = PPOPolicyLossFn()
    assert DEFAULT_CLIP_RANGE == 0.2
    assert (fn.clip_range_low, fn.clip_range_high) == (0.2, 0.2)
    explicit = PPOPolicyLossFn(clip_range=0.2)
    x = loss_inputs(3)
    torch.testing.assert_close(grad_of(fn, x)[2], grad_of(explicit, x)[2], rtol=0, atol=0)


def test_default_args_equal_the_constructor_defaults() -> None:
    defaults = PPOPolicyLossFn.default_args()
    assert defaults == {
        "loss_agg_mode": "token-mean",
        "clip_range": None,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_ratio_c": 3.0,
        "enable_sequence_masking": False,
        "delta_sequence_masking": 0.1,
        "fallback_to_policy_gradient": False,
        "fused": False,
    }
    assert PPOPolicyLossFn().args.model_dump() == defaults
    assert PPOPolicyLossFn.from_args(defaults).args.model_dump() == defaults


def test_keys_and_validation() -> None:
    assert PPOPolicyLossFn().select_keys == ["old_log_probs", "response_mask", "advantages"]
    assert PPOPolicyLossFn(backend="tinker").select_keys == ["old_logprob", "action_mask", "advantages"]
    with pytest.raises(pydantic.ValidationError, match="clip_ratio_c"):
        PPOPolicyLossFn(clip_ratio_c=1.0)
    with pytest.raises(pydantic.ValidationError, match="clip_range_low"):
        PPOPolicyLossFn(clip_range_low=-0.1)
    with pytest.raises(pydantic.ValidationError, match="loss_agg_mode"):
        PPOPolicyLossFn(loss_agg_mode="token_sum")
    with pytest.raises(pydantic.ValidationError, match="clip_rnage"):
        PPOPolicyLossFn.validate_args({"clip_rnage": 0.2})


def test_loss_agg_mode_none_uses_the_mode_the_trainer_passes() -> None:
    x = loss_inputs(5)
    by_call = grad_of(PPOPolicyLossFn(loss_agg_mode=None), x, loss_agg_mode="seq-mean-token-sum")[0]
    own = grad_of(PPOPolicyLossFn(loss_agg_mode="seq-mean-token-sum"), x)[0]
    assert float(by_call) == pytest.approx(float(own), rel=1e-12)
    assert float(by_call) != pytest.approx(float(grad_of(PPOPolicyLossFn(), x)[0]), rel=1e-6)


def test_missing_old_logprobs_is_a_clear_error_unless_falling_back() -> None:
    x = loss_inputs(0)
    x["old_log_probs"] = None  # type: ignore[assignment]
    message = (
        "old_log_probs is None; the PPO ratio needs the sampling policy's log-probs "
        "(or set fallback_to_policy_gradient=True for plain PG)"
    )
    with pytest.raises(ValueError, match=rf"^policy loss '[^']+': {re.escape(message)}$"):
        grad_of(PPOPolicyLossFn(), x)
    loss, _metrics, _grad = grad_of(PPOPolicyLossFn(fallback_to_policy_gradient=True), x)
    assert torch.isfinite(loss)


def test_fallback_is_the_plain_policy_gradient() -> None:
    # r ≡ 1 in value, ∇r = ∇logπ: loss = agg(−A), gradient −A/N on selected tokens, whatever old says.
    x = loss_inputs(7, spread=3.0)
    mask, adv = x["response_mask"], x["advantages"]
    n = mask.sum()
    loss, metrics, grad = grad_of(PPOPolicyLossFn(fallback_to_policy_gradient=True), x)
    assert float(loss) == pytest.approx(float(torch.where(mask, -adv, 0).sum() / n), rel=1e-12)
    torch.testing.assert_close(grad, torch.where(mask, -adv / n, 0.0), rtol=1e-12, atol=1e-15)
    assert float(metrics["ppo_kl"]) == 0.0
    assert float(metrics["pg_clipfrac"]) == 0.0
    assert float(metrics["pg_clipfrac_lower"]) == 0.0


def test_sequence_masking_golden() -> None:
    # Row 0: log r = [-0.3, -0.1] -> kl = 0.2 > 0.1: its A < 0 token is dropped, the A > 0 one kept.
    # Row 1: log r = [-0.05, 0.05] -> kl = 0 <= 0.1: nothing dropped. token-mean over 4 tokens.
    log_ratio = torch.tensor([[-0.3, -0.1], [-0.05, 0.05]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0], [-1.0, 2.0]], dtype=torch.float64)
    x = {
        "log_prob": log_ratio,
        "old_log_probs": torch.zeros(2, 2, dtype=torch.float64),
        "response_mask": torch.ones(2, 2, dtype=torch.bool),
        "advantages": adv,
    }
    fn = PPOPolicyLossFn(enable_sequence_masking=True, delta_sequence_masking=0.1, clip_range=10.0)
    loss, metrics, grad = grad_of(fn, x)
    r = log_ratio.exp()
    kept = [-1.0 * r[0, 0], 0.0, 1.0 * r[1, 0], -2.0 * r[1, 1]]
    assert float(loss) == pytest.approx(float(sum(kept)) / 4, rel=1e-12)
    assert float(grad[0, 1]) == 0.0
    assert float(grad[0, 0]) != 0.0
    assert float(metrics["seq_mask/masked_tokens"]) == pytest.approx(1 / 4)
    assert float(metrics["seq_mask/mean_sequence_kl"]) == pytest.approx((0.2 + 0.0) / 2, rel=1e-9)
    # Disabled, the token counts again and no seq_mask metrics are reported.
    loss_off, metrics_off, _ = grad_of(PPOPolicyLossFn(clip_range=10.0), x)
    assert float(loss_off) == pytest.approx(float(sum(kept) + r[0, 1]) / 4, rel=1e-12)
    assert not any(k.startswith("seq_mask/") for k in metrics_off)


def test_log_ratio_is_clamped_so_stale_data_never_overflows() -> None:
    x = {
        "log_prob": torch.tensor([[0.0, 0.0]]),
        "old_log_probs": torch.tensor([[-500.0, 500.0]]),
        "response_mask": torch.ones(1, 2, dtype=torch.bool),
        "advantages": torch.tensor([[-1.0, 1.0]]),
    }
    loss, metrics, grad = grad_of(PPOPolicyLossFn(clip_ratio_c=1e30), x)
    # Token 0: r = e^20, A = -1: ℓ = e^20 (no dual clip with huge c). Token 1: r = e^-20, A = 1: ℓ = -0.8.
    assert float(loss) == pytest.approx((math.exp(20) - 0.8) / 2, rel=1e-6)
    assert torch.isfinite(grad).all()
    assert all(torch.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize(
    "args",
    [{}, {"enable_sequence_masking": True}, {"fallback_to_policy_gradient": True}],
    ids=["default", "seqmask", "fallback"],
)
def test_no_host_sync_and_detached_scalar_metrics(args: dict[str, bool]) -> None:
    fn = PPOPolicyLossFn(**args)
    x = loss_inputs(1)
    lp = x.pop("log_prob").requires_grad_(True)
    with count_host_syncs() as log:
        loss, metrics = fn(lp, **x)
        loss.backward()
    assert len(log) == 0, log.describe()
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())


@pytest.mark.parametrize("args", [{}, {"enable_sequence_masking": True, "delta_sequence_masking": -1.0}])
def test_nan_and_inf_at_masked_positions_change_nothing(args: dict[str, object]) -> None:
    clean = loss_inputs(11)
    dirty = {k: v.clone() for k, v in clean.items()}
    hidden = ~clean["response_mask"]
    for key, bad in (("log_prob", math.nan), ("old_log_probs", math.inf), ("advantages", -math.inf)):
        dirty[key] = torch.where(hidden, bad, dirty[key])
    fn = PPOPolicyLossFn(**args)  # type: ignore[arg-type]
    loss_a, metrics_a, grad_a = grad_of(fn, clean)
    loss_b, metrics_b, grad_b = grad_of(fn, dirty)
    assert torch.equal(loss_a, loss_b)
    assert torch.equal(grad_a, grad_b)
    assert bool((grad_b[hidden] == 0).all())
    assert metrics_a.keys() == metrics_b.keys()
    for key in metrics_a:
        assert torch.equal(metrics_a[key], metrics_b[key]), key


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(
        ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
    ),
    split=st.integers(1, 5),
)
def test_micro_batches_with_global_normalizers_sum_to_the_full_batch(
    seed: int, mode: str, split: int
) -> None:
    x = loss_inputs(seed, b=6)
    fn = PPOPolicyLossFn(loss_agg_mode=mode, clip_range_high=0.28, enable_sequence_masking=True)  # type: ignore[arg-type]
    t = x["response_mask"].shape[1]
    full_scale = global_normalizers(x["response_mask"], max_tokens=t)
    full_loss, _, full_grad = grad_of(fn, x, loss_scale=full_scale)
    parts = [{k: v[:split] for k, v in x.items()}, {k: v[split:] for k, v in x.items()}]
    scale = global_normalizers([p["response_mask"] for p in parts], max_tokens=t)
    results = [grad_of(fn, p, loss_scale=scale) for p in parts]
    total = results[0][0] + results[1][0]
    assert float(total) == pytest.approx(float(full_loss), rel=1e-6, abs=1e-12)
    torch.testing.assert_close(torch.cat([results[0][2], results[1][2]]), full_grad, rtol=1e-6, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1), lo=st.floats(0.0, 0.5), hi=st.floats(0.0, 0.5), c=st.floats(1.01, 10.0)
)
def test_loss_matches_the_elementwise_formula(seed: int, lo: float, hi: float, c: float) -> None:
    x = loss_inputs(seed)
    fn = PPOPolicyLossFn(clip_range_low=lo, clip_range_high=hi, clip_ratio_c=c)
    loss, _, _ = grad_of(fn, x)
    total, count = 0.0, 0
    for lp, old, m, a in zip(
        x["log_prob"].flatten().tolist(),
        x["old_log_probs"].flatten().tolist(),
        x["response_mask"].flatten().tolist(),
        x["advantages"].flatten().tolist(),
        strict=True,
    ):
        if not m:
            continue
        r = math.exp(max(-20.0, min(20.0, lp - old)))
        c1 = max(-a * r, -a * min(max(r, 1 - lo), 1 + hi))
        total += min(c1, -a * c) if a < 0 else c1
        count += 1
    assert float(loss) == pytest.approx(total / count, rel=1e-9, abs=1e-12)
