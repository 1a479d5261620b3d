"""on_policy_distill and jsd: golden values from the formulas, masking, columns, host syncs."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from distill_support import make_batch, plant_nan, random_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_distill import JSDAdvantage, OnPolicyDistillAdvantage
from trinity_plugin_distill.jsd import jsd_surrogate

from trinity_core.testing import count_host_syncs


def test_on_policy_distill_golden() -> None:
    batch = make_batch([[-1.0, -2.0, -0.5], [-0.25, -3.0]], [[-0.5, -3.0, -0.5], [-1.25, -1.0]])
    out, metrics = OnPolicyDistillAdvantage(kl_coef=2.0)(batch)
    # A = 2 (t - s): row 0 -> [1, -2, 0], row 1 -> [-2, 4] (padded with 0)
    expected = torch.tensor([[1.0, -2.0, 0.0], [-2.0, 4.0, 0.0]])
    torch.testing.assert_close(out.advantages, expected)
    torch.testing.assert_close(out.returns, expected)
    # per-row sums of (s - t): row 0 = -0.5 + 1 + 0 = 0.5, row 1 = 1 - 2 = -1
    assert float(metrics["kl/mean"]) == pytest.approx(-0.25)
    assert float(metrics["kl/std"]) == pytest.approx(math.sqrt(((0.5 + 0.25) ** 2 + (-1 + 0.25) ** 2) / 1))
    assert float(metrics["advantages/mean"]) == pytest.approx((-1.0 + 2.0) / 2)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())


def test_single_row_std_is_zero_and_args_validate() -> None:
    _, metrics = OnPolicyDistillAdvantage()(make_batch([[-1.0]], [[-2.0]]))
    assert float(metrics["kl/std"]) == 0.0
    assert OnPolicyDistillAdvantage.default_args() == {"kl_coef": 1.0}
    assert JSDAdvantage.default_args() == {
        "lambda_coef": 0.5,
        "kl_coef": 1.0,
        "temperature": 1.0,
        "chunk_size": None,
    }
    with pytest.raises(pydantic.ValidationError, match="lambda_coef"):
        JSDAdvantage(lambda_coef=1.5)
    with pytest.raises(pydantic.ValidationError, match="temperature"):
        JSDAdvantage(temperature=0.0)


def test_jsd_golden_mixture() -> None:
    s, t, beta = math.log(0.5), math.log(0.25), 0.5
    log_m = math.log(0.5 * 0.5 + 0.5 * 0.25)
    jsd = beta * (t - log_m) + (1 - beta) * (s - log_m)
    out, metrics = JSDAdvantage(kl_coef=3.0)(make_batch([[s]], [[t]]))
    assert float(out.advantages[0, 0]) == pytest.approx(-3.0 * jsd, rel=1e-6)
    assert float(metrics["jsd/mean"]) == pytest.approx(jsd, rel=1e-6)
    # jsd here is -0.0589 + 0.1438: per-token terms of either sign (a surrogate, not a divergence)
    assert t - log_m < 0 < s - log_m


def test_jsd_surrogate_can_be_negative() -> None:
    # teacher far likelier than student at the sampled token: the surrogate is negative
    value = float(jsd_surrogate(torch.tensor(math.log(0.01)), torch.tensor(math.log(0.9)), 0.5))
    assert value < 0


def test_jsd_end_points_are_special_cases() -> None:
    batch = random_batch(1, 5, 6)
    distill, _ = OnPolicyDistillAdvantage()(random_batch(1, 5, 6))
    beta0, _ = JSDAdvantage(lambda_coef=0.0)(random_batch(1, 5, 6))
    beta1, _ = JSDAdvantage(lambda_coef=1.0)(batch)
    torch.testing.assert_close(beta0.advantages, distill.advantages)
    torch.testing.assert_close(beta1.advantages, -distill.advantages)  # pushes away from the teacher
    # ... and not the limits of the mixture formula, which tends to 0 at both ends
    s, t = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert abs(float(jsd_surrogate(s, t, 1e-6))) < 1e-5
    assert abs(float(jsd_surrogate(s, t, 1 - 1e-6))) < 1e-5


def test_temperature_divides_logprobs_not_logits() -> None:
    logits = torch.tensor([2.0, 0.0, -1.0])
    teacher_logits = torch.tensor([0.5, 1.0, -2.0])
    T = 2.0
    s, t = torch.log_softmax(logits, 0)[0], torch.log_softmax(teacher_logits, 0)[0]
    out, _ = JSDAdvantage(temperature=T)(make_batch([[float(s)]], [[float(t)]]))
    expected = -jsd_surrogate(s / T, t / T, 0.5)
    assert float(out.advantages[0, 0]) == pytest.approx(float(expected), rel=1e-5)
    tempered = -jsd_surrogate(
        torch.log_softmax(logits / T, 0)[0], torch.log_softmax(teacher_logits / T, 0)[0], 0.5
    )
    assert abs(float(out.advantages[0, 0]) - float(tempered)) > 1e-3  # documented: not a logit temperature


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), chunk=st.integers(1, 40), beta=st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_jsd_chunking_changes_nothing(seed: int, chunk: int, beta: float) -> None:
    whole, m1 = JSDAdvantage(lambda_coef=beta)(random_batch(seed, 5, 7))
    parts, m2 = JSDAdvantage(lambda_coef=beta, chunk_size=chunk)(random_batch(seed, 5, 7))
    torch.testing.assert_close(whole.advantages, parts.advantages)
    assert m1.keys() == m2.keys()


@pytest.mark.parametrize(
    "fn", [OnPolicyDistillAdvantage(kl_coef=0.7), JSDAdvantage(lambda_coef=0.3, chunk_size=4)]
)
def test_nan_at_masked_positions_does_not_leak(fn: object) -> None:
    clean, clean_metrics = fn(random_batch(3, 6, 8))  # type: ignore[operator]
    dirty_batch = random_batch(3, 6, 8)
    plant_nan(dirty_batch)
    dirty, dirty_metrics = fn(dirty_batch)  # type: ignore[operator]
    assert torch.isfinite(dirty.advantages).all()
    torch.testing.assert_close(dirty.advantages, clean.advantages)
    for key, value in clean_metrics.items():
        torch.testing.assert_close(dirty_metrics[key], value)


@pytest.mark.parametrize("fn", [OnPolicyDistillAdvantage(), JSDAdvantage(), JSDAdvantage(chunk_size=3)])
def test_no_host_sync(fn: object) -> None:
    batch = random_batch(4, 6, 8)
    with count_host_syncs() as log:
        fn(batch)  # type: ignore[operator]
    assert len(log) == 0, log.describe()


def test_old_logprobs_column_is_preferred_over_rollout_logprobs() -> None:
    batch = make_batch([[-1.0, -1.0]], [[-0.5, -0.5]])
    batch.extras["old_logprobs"] = torch.tensor([[-2.0, -0.5]])
    out, _ = OnPolicyDistillAdvantage()(batch)
    torch.testing.assert_close(out.advantages, torch.tensor([[1.5, 0.0]]))


def test_missing_teacher_logprobs_says_what_to_set() -> None:
    with pytest.raises(KeyError, match=r"teacher_logprobs.*Experience\.teacher_logprobs"):
        OnPolicyDistillAdvantage()(make_batch([[-1.0]], None))
    with pytest.raises(KeyError, match=r"needed by (jsd|JSDAdvantage)"):
        JSDAdvantage()(make_batch([[-1.0]], None))
