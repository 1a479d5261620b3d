"""Agreement with the reference MIX and CHORD losses (loss and gradient without loss_scale), and the
documented differences: metrics not multiplied by the sample weights, empty subsets
(reference-differences.md#mix-metrics)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mix_support import loss_and_grad, mixed_batch, rest
from trinity_plugin_mix import MIXCHORDPolicyLossFn, MIXPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference

WEIGHTS = {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 2, "train_batch_size_usual": 12}
WEIGHTS["train_batch_size_expert"] = 4


def reference_mix(**args: object) -> object:
    return import_reference("trinity.algorithm.policy_loss_fn.mix_policy_loss").MIXPolicyLossFn(**args)


def reference_chord(**args: object) -> object:
    return import_reference("trinity.algorithm.policy_loss_fn.chord_policy_loss").MIXCHORDPolicyLossFn(**args)


def with_step(x: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
    return {**rest(x), "step": torch.full((x["logprob"].shape[0],), step, dtype=torch.int32)}


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]),
    dynamic=st.sampled_from([None, True]),
    mu=st.floats(0.0, 1.0),
)
def test_mix_loss_and_gradient_agree_with_the_reference(
    seed: int, mode: str, dynamic: bool | None, mu: float
) -> None:
    args = {"mu": mu, "clip_range": 0.2, "loss_agg_mode": mode, "use_dynamic_bsz": dynamic, **WEIGHTS}
    x = mixed_batch(seed)
    ours = loss_and_grad(MIXPolicyLossFn(**args), x["logprob"], **rest(x))
    theirs = loss_and_grad(reference_mix(**args), x["logprob"], **rest(x))
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-9)


def test_reference_metrics_are_ours_times_the_sample_weights() -> None:
    x = mixed_batch(3, b=6)  # rows 0 and 3 expert: n_usual = 4, n_expert = 2
    args = {"mu": 0.3, "clip_range": 0.2, **WEIGHTS}
    _, ours, _ = loss_and_grad(MIXPolicyLossFn(**args), x["logprob"], **rest(x))
    _, theirs, _ = loss_and_grad(reference_mix(**args), x["logprob"], **rest(x))
    w_usual, w_expert = (8 // 2) / 12, (8 // 2) / 4
    for key in ("usual/pg_loss", "usual/pg_clipfrac", "usual/ppo_kl", "usual/pg_clipfrac_lower"):
        assert float(ours[key]) * 4 * w_usual == pytest.approx(theirs[key], rel=1e-6, abs=1e-9), key
    assert float(ours["expert/sft_loss"]) * 2 * w_expert == pytest.approx(theirs["expert/sft_loss"], rel=1e-6)
    assert float(ours["loss"]) == pytest.approx(theirs["loss"], rel=1e-6)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    step=st.integers(0, 12),
    phi=st.booleans(),
    schedule=st.tuples(st.integers(0, 5), st.integers(0, 5), st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
)
def test_chord_loss_gradient_and_mu_agree_with_the_reference(
    seed: int, step: int, phi: bool, schedule: tuple[int, int, float, float]
) -> None:
    warmup, decay, peak, valley = schedule
    args = {"mu_warmup_steps": warmup, "mu_decay_steps": decay, "mu_peak": peak, "mu_valley": valley}
    args |= {"enable_phi_function": phi, "clip_range": 0.2, **WEIGHTS}
    x = mixed_batch(seed)
    ours = loss_and_grad(MIXCHORDPolicyLossFn(**args), x["logprob"], **with_step(x, step))
    theirs = loss_and_grad(reference_chord(**args), x["logprob"], **with_step(x, step))
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-9)
    assert float(ours[1]["mu"]) == pytest.approx(theirs[1]["mu"], rel=1e-9, abs=1e-12)


def test_chord_with_no_expert_rows_is_finite_where_the_reference_is_nan() -> None:
    x = mixed_batch(4, experts=[])
    args = {"loss_agg_mode": "seq-mean-token-mean", "clip_range": 0.2}
    ours = loss_and_grad(MIXCHORDPolicyLossFn(**args), x["logprob"], **with_step(x, 0))
    theirs, _ = reference_chord(**args)(x["logprob"], **with_step(x, 0))
    assert math.isnan(float(theirs))
    assert math.isfinite(float(ours[0]))
    assert bool(torch.isfinite(ours[2]).all())
