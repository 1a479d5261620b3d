"""The mix and mix_chord losses: golden values, weights, empty subsets, masking, host syncs, global
normalisation per subset, and the μ schedule."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from mix_support import loss_and_grad, mixed_batch, rest
from trinity_plugin_mix import MIXCHORDPolicyLossFn, MIXPolicyLossFn, mix_normalizers, mu_schedule

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def chord(**args: object) -> MIXCHORDPolicyLossFn:
    return MIXCHORDPolicyLossFn(**args)


def with_step(x: dict[str, torch.Tensor], step: int = 0) -> dict[str, torch.Tensor]:
    return {**x, "step": torch.full((x["logprob"].shape[0],), step, dtype=torch.int32)}


def test_defaults_keys_and_argument_validation() -> None:
    assert MIXPolicyLossFn().select_keys == ["old_log_probs", "response_mask", "advantages", "expert_mask"]
    assert chord().select_keys == ["old_log_probs", "response_mask", "advantages", "expert_mask", "step"]
    defaults = MIXPolicyLossFn.default_args()
    assert (defaults["mu"], defaults["clip_range"], defaults["loss_agg_mode"]) == (0.1, 0.2, "token-mean")
    c = MIXCHORDPolicyLossFn.default_args()
    assert (c["mu_warmup_steps"], c["mu_decay_steps"], c["mu_peak"], c["mu_valley"]) == (0, 0, 0.1, 0.1)
    assert c["enable_phi_function"] is True
    assert MIXPolicyLossFn(clip_range_high=0.28).clip_high == 0.28
    with pytest.raises(pydantic.ValidationError, match="mu"):
        MIXPolicyLossFn(mu=1.5)
    with pytest.raises(pydantic.ValidationError, match="clip_range"):
        MIXPolicyLossFn(clip_range=None, clip_range_low=0.2)
    with pytest.raises(pydantic.ValidationError, match="ngpus_trainer"):
        MIXPolicyLossFn(ngpus_trainer=2)


def golden() -> dict[str, torch.Tensor]:
    # Row 0 (rollout): log-ratios 0, 0.5, −0.5 with A = 1, fourth token padded.
    # Row 1 (expert): log p = −1, −2; its old_logprob and advantages are NaN (never read).
    nan = math.nan
    return {
        "logprob": torch.tensor([[-1.0, -0.5, -1.5, nan], [-1.0, -2.0, nan, nan]], dtype=torch.float64),
        "old_logprob": torch.tensor([[-1.0, -1.0, -1.0, nan], [nan, nan, nan, nan]], dtype=torch.float64),
        "action_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool),
        "advantages": torch.tensor([[1.0, 1.0, 1.0, nan], [nan, nan, nan, nan]], dtype=torch.float64),
        "expert_mask": torch.tensor([False, True]),
    }


def test_mix_golden_values() -> None:
    x = golden()
    loss, metrics, grad = loss_and_grad(MIXPolicyLossFn(mu=0.25), x["logprob"], **rest(x))
    r = [1.0, math.exp(0.5), math.exp(-0.5)]
    # PPO per token: r=1 -> −1 (grad −1); r=1.65 -> clipped at −1.2 (grad 0); r=0.61 -> −0.61 (grad −0.61).
    rl = (-1.0 - 1.2 - r[2]) / 3
    sft = (1.0 + 2.0) / 2
    assert float(loss) == pytest.approx(0.75 * rl + 0.25 * sft, rel=1e-12)
    expected = torch.tensor(
        [[-0.75 / 3, 0.0, -0.75 * r[2] / 3, 0.0], [-0.25 / 2, -0.25 / 2, 0.0, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["usual/pg_loss"]) == pytest.approx(rl)
    assert float(metrics["usual/pg_clipfrac"]) == pytest.approx(1 / 3)
    assert float(metrics["usual/pg_clipfrac_lower"]) == 0.0
    assert float(metrics["usual/ppo_kl"]) == pytest.approx(0.0, abs=1e-15)
    assert float(metrics["expert/sft_loss"]) == pytest.approx(sft)
    assert float(metrics["loss"]) == pytest.approx(float(loss))


def test_dual_clip_for_negative_advantages() -> None:
    # A = −1, r = e^2 = 7.39: L1 = 7.39, L2 = 1.2, C1 = 7.39 > L3 = c·1 = 3 -> loss 3, no gradient.
    x = golden()
    x["advantages"] = torch.full_like(x["advantages"], -1.0)
    x["logprob"][0, 0] = 1.0
    _, metrics, grad = loss_and_grad(MIXPolicyLossFn(mu=0.0), x["logprob"], **rest(x))
    assert float(metrics["usual/pg_clipfrac_lower"]) == pytest.approx(1 / 3)
    assert float(grad[0, 0]) == 0.0
    # Other tokens (A = −1): r = e^0.5 -> max(r, 1.2) = r; r = e^−0.5 = 0.61 -> max(r, 0.8) = 0.8.
    assert float(metrics["usual/pg_loss"]) == pytest.approx((3.0 + math.exp(0.5) + 0.8) / 3)


@pytest.mark.parametrize("dynamic", [None, False, True])
def test_local_weights_follow_the_reference_formula(dynamic: bool | None) -> None:
    args = {"use_dynamic_bsz": dynamic, "ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 2}
    args |= {"ngpus_trainer": 2, "train_batch_size_usual": 12, "train_batch_size_expert": 4, "mu": 0.3}
    x = mixed_batch(0, b=6)  # 4 rollout rows, 2 expert rows
    loss, metrics, _ = loss_and_grad(MIXPolicyLossFn(**args), x["logprob"], **rest(x))
    if dynamic:
        w_u, w_e = (8 // 2) / (6 * (12 // 2)), (8 // 2) / (6 * (4 // 2))
    else:
        w_u, w_e = (8 // 2) / (12 // 2), (8 // 2) / (4 // 2)
    expected = 0.7 * metrics["usual/pg_loss"] * 4 * w_u + 0.3 * metrics["expert/sft_loss"] * 2 * w_e
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("experts", [[], [0, 1, 2, 3]])
@pytest.mark.parametrize("make", [MIXPolicyLossFn, chord])
def test_an_empty_subset_contributes_zero(mode: str, experts: list[int], make: object) -> None:
    x = mixed_batch(1, b=4, experts=experts)
    kwargs = rest(x) if make is MIXPolicyLossFn else rest(with_step(x))
    loss, metrics, grad = loss_and_grad(make(loss_agg_mode=mode), x["logprob"], **kwargs)  # type: ignore[operator]
    assert bool(torch.isfinite(loss))
    assert bool(torch.isfinite(grad).all())
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    empty = "usual/pg_loss" if experts else next(k for k in metrics if k.startswith("expert/"))
    assert float(metrics[empty]) == 0.0


def test_metrics_are_the_unweighted_subset_losses() -> None:
    x = mixed_batch(2, b=6)
    args = {"ppo_mini_batch_size": 4, "train_batch_size_usual": 2, "train_batch_size_expert": 2, "mu": 0.4}
    _, metrics, _ = loss_and_grad(MIXPolicyLossFn(**args), x["logprob"], **rest(x))
    usual = ~x["expert_mask"]
    only_usual = {k: v[usual] for k, v in x.items()}
    _, usual_metrics, _ = loss_and_grad(MIXPolicyLossFn(**args), only_usual["logprob"], **rest(only_usual))
    for key in ("usual/pg_loss", "usual/pg_clipfrac", "usual/ppo_kl"):
        torch.testing.assert_close(metrics[key], usual_metrics[key])
    lp, mask = x["logprob"][~usual], x["action_mask"][~usual]
    torch.testing.assert_close(metrics["expert/sft_loss"], -lp[mask].mean())


@pytest.mark.parametrize("make", [MIXPolicyLossFn, chord])
def test_nan_and_inf_outside_each_subset_leak_nowhere(make: object) -> None:
    x = with_step(mixed_batch(3))
    dirty = dict(x)
    mask, expert = x["action_mask"], x["expert_mask"]
    for key, value in (("logprob", math.nan), ("old_logprob", math.inf), ("advantages", -math.inf)):
        dirty[key] = x[key].clone()
        dirty[key][~mask] = value
    dirty["old_logprob"][expert] = math.nan  # expert rows carry no usable old log-probs ...
    dirty["advantages"][expert] = math.inf  # ... nor advantages
    fn = make()  # type: ignore[operator]
    pick = (
        (lambda d: rest(d))
        if make is chord
        else (lambda d: {k: v for k, v in rest(d).items() if k != "step"})
    )
    clean = loss_and_grad(fn, x["logprob"], **pick(x))
    polluted = loss_and_grad(fn, dirty["logprob"], **pick(dirty))
    assert torch.equal(clean[0], polluted[0])
    assert torch.equal(clean[2], polluted[2])
    for key, value in clean[1].items():
        assert torch.equal(value, polluted[1][key]), key


@pytest.mark.parametrize("global_scale", [False, True])
def test_no_host_sync(global_scale: bool) -> None:
    x = with_step(mixed_batch(4))
    scale = {"loss_scale": mix_normalizers(x["action_mask"], x["expert_mask"])} if global_scale else {}
    for fn in (MIXPolicyLossFn(), chord(mu_warmup_steps=3, mu_decay_steps=5)):
        keys = set(fn.select_keys) | {"old_log_probs", "response_mask"}
        batch = {
            "old_log_probs": x["old_logprob"],
            "response_mask": x["action_mask"],
            "advantages": x["advantages"],
            "expert_mask": x["expert_mask"],
            "step": x["step"],
        }
        leaf = x["logprob"].clone().requires_grad_(True)
        with count_host_syncs() as log:
            loss, metrics = fn(log_prob=leaf, **{k: v for k, v in batch.items() if k in keys}, **scale)
            loss.backward()
        assert len(log) == 0, log.describe()
        assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())


@pytest.mark.parametrize(
    ("mode", "sft_mode"),
    [
        ("token-mean", None),
        ("seq-mean-token-mean", None),
        ("seq-mean-token-sum", "token-mean"),
        ("seq-mean-token-sum-norm", None),
    ],
)
@pytest.mark.parametrize("make", [MIXPolicyLossFn, chord])
def test_micro_batches_with_subset_normalizers_give_the_full_batch_gradient(
    mode: str, sft_mode: str | None, make: object
) -> None:
    x = with_step(mixed_batch(5, b=8, experts=[0, 3, 4]), step=2)
    x["action_mask"][6] = False  # a fully masked row
    fn = (
        make(loss_agg_mode=mode, sft_loss_agg_mode=sft_mode, mu_peak=0.3)
        if make is chord
        else make(  # type: ignore[operator]
            loss_agg_mode=mode, sft_loss_agg_mode=sft_mode, mu=0.3
        )
    )
    inputs = rest(x) if make is chord else {k: v for k, v in rest(x).items() if k != "step"}
    full_scale = mix_normalizers(x["action_mask"], x["expert_mask"], max_tokens=7)
    full, _, full_grad = loss_and_grad(fn, x["logprob"], loss_scale=full_scale, **inputs)
    parts = [slice(0, 3), slice(3, 4), slice(4, 8)]
    scale = mix_normalizers(
        [x["action_mask"][p] for p in parts], [x["expert_mask"][p] for p in parts], max_tokens=7
    )
    leaf = x["logprob"].clone().requires_grad_(True)
    total = sum(fn(leaf[p], loss_scale=scale, **{k: v[p] for k, v in inputs.items()})[0] for p in parts)
    total.backward()
    torch.testing.assert_close(total.detach(), full, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(leaf.grad, full_grad, rtol=1e-12, atol=1e-14)


def test_global_terms_are_the_subset_means() -> None:
    x = mixed_batch(6, b=6)
    scale = mix_normalizers(x["action_mask"], x["expert_mask"])
    loss, metrics, _ = loss_and_grad(MIXPolicyLossFn(mu=0.2), x["logprob"], loss_scale=scale, **rest(x))
    lp, mask = x["logprob"][x["expert_mask"]], x["action_mask"][x["expert_mask"]]
    torch.testing.assert_close(metrics["expert/sft_loss"], -lp[mask].mean())
    torch.testing.assert_close(loss, 0.8 * metrics["usual/pg_loss"] + 0.2 * metrics["expert/sft_loss"])


def test_a_plain_loss_scale_is_rejected() -> None:
    x = mixed_batch(7)
    with pytest.raises(TypeError, match="MixLossScale"):
        MIXPolicyLossFn()(x["logprob"], loss_scale=global_normalizers(x["action_mask"]), **rest(x))


def test_mu_schedule_golden_values() -> None:
    steps = torch.tensor([0, 1, 2, 4, 6, 10])
    got = mu_schedule(steps, warmup_steps=2, decay_steps=4, peak=0.5, valley=0.1)
    # warm-up 0 -> 0.5 over 2 steps; cosine 0.5 -> 0.1 over 4 steps (midpoint 0.3); then 0.1.
    torch.testing.assert_close(got, torch.tensor([0.0, 0.25, 0.5, 0.3, 0.1, 0.1], dtype=torch.float64))
    flat = mu_schedule(torch.tensor([0, 5, 100]), 0, 0, peak=0.7, valley=0.2)
    torch.testing.assert_close(flat, torch.full((3,), 0.2, dtype=torch.float64))


def test_chord_uses_the_scheduled_mu_and_the_phi_weighted_sft_term() -> None:
    x = with_step(mixed_batch(8), step=1)
    args = {"mu_warmup_steps": 2, "mu_decay_steps": 2, "mu_peak": 0.6, "mu_valley": 0.2}
    loss, metrics, _ = loss_and_grad(chord(**args), x["logprob"], **rest(x))
    assert float(metrics["mu"]) == pytest.approx(0.3)
    torch.testing.assert_close(
        loss, 0.7 * metrics["usual/pg_loss"] * 4 + 0.3 * metrics["expert/sft_phi_loss"] * 2
    )
    _, plain, _ = loss_and_grad(chord(enable_phi_function=False, **args), x["logprob"], **rest(x))
    assert "expert/sft_loss" in plain
    with pytest.raises(ValueError, match="step has shape"):
        chord()(x["logprob"], **{**rest(x), "step": torch.zeros(2, dtype=torch.int64)})
