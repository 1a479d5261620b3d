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
from trinity_plugin_distill.jsd import jsd_student_term, jsd_surrogate

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
        "estimator": "student",
    }
    with pytest.raises(pydantic.ValidationError, match="lambda_coef"):
        JSDAdvantage(lambda_coef=1.5)
    with pytest.raises(pydantic.ValidationError, match="temperature"):
        JSDAdvantage(temperature=0.0)


def test_jsd_golden_mixture() -> None:
    s, t, beta = math.log(0.5), math.log(0.25), 0.5
    log_m = math.log(0.5 * 0.5 + 0.5 * 0.25)
    student = (1 - beta) * (s - log_m)  # 0.1438: the student over-weights the token, A < 0
    reference = beta * (t - log_m) + (1 - beta) * (s - log_m)  # -0.0589 + 0.1438
    for estimator, jsd in (("student", student), ("reference", reference)):
        out, metrics = JSDAdvantage(kl_coef=3.0, estimator=estimator)(make_batch([[s]], [[t]]))
        assert float(out.advantages[0, 0]) == pytest.approx(-3.0 * jsd, rel=1e-6)
        assert float(metrics["jsd/mean"]) == pytest.approx(jsd, rel=1e-6)
    assert student > 0 > reference


@settings(max_examples=200, deadline=None)
@given(
    s=st.floats(-30.0, 0.0),
    t=st.floats(-30.0, 0.0),
    beta=st.floats(0.01, 0.99),
)
def test_the_reference_surrogate_is_never_positive_and_the_student_term_has_the_sign_of_s_minus_t(
    s: float, t: float, beta: float
) -> None:
    # beta·t + (1 − beta)·s ≤ log((1 − beta)·e^s + beta·e^t): every advantage of the reference is ≥ 0.
    s_, t_ = torch.tensor(s, dtype=torch.float64), torch.tensor(t, dtype=torch.float64)
    assert float(jsd_surrogate(s_, t_, beta)) <= 1e-12
    # s − log m has the sign of s − t: m lies between p_s and p_t.
    term = float(jsd_student_term(s_, t_, beta))
    if abs(s - t) > 1e-9:
        assert math.copysign(1.0, term) == math.copysign(1.0, s - t)


def test_the_student_term_is_the_gradient_of_the_vocabulary_jsd() -> None:
    """Over a full vocabulary: the exact gradient of D = beta·KL(p_t‖m) + (1 − beta)·KL(p_s‖m) with
    respect to the student's logits equals the expectation, under the student, of the term times the
    score function (the estimate the advantage feeds to the policy gradient)."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(7, generator=gen, dtype=torch.float64, requires_grad=True)
    teacher = torch.log_softmax(torch.randn(7, generator=gen, dtype=torch.float64), -1)
    beta = 0.3
    s = torch.log_softmax(logits, -1)
    m = torch.logaddexp(s + math.log1p(-beta), teacher + math.log(beta))
    divergence = beta * (teacher.exp() * (teacher - m)).sum() + (1 - beta) * (s.exp() * (s - m)).sum()
    (exact,) = torch.autograd.grad(divergence, logits)
    term = jsd_student_term(s.detach(), teacher, beta)
    probs = s.detach().exp()
    score = torch.eye(7, dtype=torch.float64) - probs  # row y: d log p_s(y) / d logits
    estimate = (probs[:, None] * term[:, None] * score).sum(0)
    torch.testing.assert_close(estimate, exact, rtol=1e-10, atol=1e-12)
    reference = (probs[:, None] * jsd_surrogate(s.detach(), teacher, beta)[:, None] * score).sum(0)
    assert not torch.allclose(reference, exact, atol=1e-3)


def test_jsd_end_points_are_special_cases() -> None:
    batch = random_batch(1, 5, 6)
    distill, _ = OnPolicyDistillAdvantage()(random_batch(1, 5, 6))
    beta0, _ = JSDAdvantage(lambda_coef=0.0)(random_batch(1, 5, 6))
    beta1, _ = JSDAdvantage(lambda_coef=1.0)(batch)
    torch.testing.assert_close(beta0.advantages, distill.advantages)
    torch.testing.assert_close(beta1.advantages, -distill.advantages)  # pushes away from the teacher
    # ... and not the limits of the mixture formula, which tends to 0 at both ends
    s, t = torch.tensor([-1.0]), torch.tensor([-2.0])
    for term in (jsd_surrogate, jsd_student_term):
        assert abs(float(term(s, t, 1e-6))) < 1e-5
        assert abs(float(term(s, t, 1 - 1e-6))) < 1e-5
    for estimator in ("student", "reference"):
        beta0, _ = JSDAdvantage(lambda_coef=0.0, estimator=estimator)(random_batch(1, 5, 6))
        torch.testing.assert_close(beta0.advantages, distill.advantages)


def test_temperature_divides_logprobs_not_logits() -> None:
    logits = torch.tensor([2.0, 0.0, -1.0])
    teacher_logits = torch.tensor([0.5, 1.0, -2.0])
    T = 2.0
    s, t = torch.log_softmax(logits, 0)[0], torch.log_softmax(teacher_logits, 0)[0]
    out, _ = JSDAdvantage(temperature=T)(make_batch([[float(s)]], [[float(t)]]))
    expected = -jsd_student_term(s / T, t / T, 0.5)
    assert float(out.advantages[0, 0]) == pytest.approx(float(expected), rel=1e-5)
    tempered = -jsd_student_term(
        torch.log_softmax(logits / T, 0)[0], torch.log_softmax(teacher_logits / T, 0)[0], 0.5
    )
    assert abs(float(out.advantages[0, 0]) - float(tempered)) > 1e-3  # documented: not a logit temperature


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), chunk=st.integers(1, 40), beta=st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_jsd_chunking_changes_nothing(seed: int, chunk: int, beta: float) -> None:
    estimator = ("student", "reference")[seed % 2]
    whole, m1 = JSDAdvantage(lambda_coef=beta, estimator=estimator)(random_batch(seed, 5, 7))
    parts, m2 = JSDAdvantage(lambda_coef=beta, chunk_size=chunk, estimator=estimator)(
        random_batch(seed, 5, 7)
    )
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
