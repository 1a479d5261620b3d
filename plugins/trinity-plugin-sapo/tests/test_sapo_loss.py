"""The ``sapo`` policy loss: gradient = the paper's soft-gate weight, masking, clamping, normalisers."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_sapo import SAPOPolicyLossFn

from trinity_core.ops import global_normalizers
from trinity_core.testing.host_syncs import count_host_syncs


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def paper_weight(r: float, tau: float) -> float:
    """w(r) = f'(r)·r with f(r) = σ(τ(r−1))·4/τ: d/dr f = 4σ(1−σ), times r from dr/dlogπ = r."""
    s = sigmoid(tau * (r - 1))
    return 4 * s * (1 - s) * r


def grad_of_loss(fn: SAPOPolicyLossFn, logprob: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
    lp = logprob.clone().requires_grad_(True)
    loss, _ = fn(lp, **kwargs)
    loss.backward()
    assert lp.grad is not None
    return lp.grad


def test_defaults_keys_and_validation() -> None:
    assert SAPOPolicyLossFn.default_args() == {
        "loss_agg_mode": "token-mean",
        "tau_pos": 1.0,
        "tau_neg": 1.05,
        "fused": False,
    }
    assert SAPOPolicyLossFn().select_keys == ["old_log_probs", "response_mask", "advantages"]
    assert SAPOPolicyLossFn(backend="tinker").select_keys == ["old_logprob", "action_mask", "advantages"]
    with pytest.raises(pydantic.ValidationError, match="tau_neg"):
        SAPOPolicyLossFn(tau_pos=2.0)
    with pytest.raises(pydantic.ValidationError):
        SAPOPolicyLossFn(tau_pos=0.0)


def test_gradient_golden_values() -> None:
    # One row, tokens with r = 0.5, 1, 2 (A = +2, τ = 1) and r = 0.5, 3 (A = -1, τ = 1.05), the last
    # token masked out. token-mean over 5 tokens: ∂L/∂logπ_t = -A_t · w(r_t) / 5.
    ratios = [0.5, 1.0, 2.0, 0.5, 3.0, 7.0]
    adv = [2.0, 2.0, 2.0, -1.0, -1.0, -1.0]
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]], dtype=torch.bool)
    old = torch.zeros(1, 6, dtype=torch.float64)
    logprob = torch.log(torch.tensor([ratios], dtype=torch.float64))
    fn = SAPOPolicyLossFn()
    grad = grad_of_loss(
        fn, logprob, old_logprob=old, action_mask=mask, advantages=torch.tensor([adv]).double()
    )
    taus = [1.0, 1.0, 1.0, 1.05, 1.05]
    expected = [-a * paper_weight(r, t) / 5 for r, a, t in zip(ratios, adv, taus, strict=False)] + [0.0]
    torch.testing.assert_close(grad, torch.tensor([expected], dtype=torch.float64), rtol=1e-12, atol=1e-15)
    # The loss value is the negated objective: -mean(A · σ(τ(r−1)) · 4/τ).
    loss, _ = fn(logprob, old_logprob=old, action_mask=mask, advantages=torch.tensor([adv]).double())
    value = -sum(a * sigmoid(t * (r - 1)) * 4 / t for r, a, t in zip(ratios, adv, taus, strict=False)) / 5
    assert float(loss) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("tau", [0.5, 1.0, 1.05, 4.0])
def test_weight_is_one_on_policy_and_bell_shaped(tau: float) -> None:
    fn = SAPOPolicyLossFn(tau_pos=tau, tau_neg=tau)
    adv = torch.ones(())
    assert float(fn.gradient_weight(torch.ones((), dtype=torch.float64), adv)) == pytest.approx(
        1.0, abs=1e-15
    )
    r = torch.exp(torch.linspace(-12, 6, 2001, dtype=torch.float64))
    w = fn.gradient_weight(r, adv)
    assert bool((w >= 0).all())
    assert float(w[0]) < 1e-4
    assert float(w[-1]) < 1e-4
    rising = torch.diff(w) > 0
    peak = int(torch.argmax(w))
    assert bool(rising[:peak].all())
    assert not bool(rising[peak:].any())


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 6)),
    mode=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]),
    taus=st.tuples(st.floats(0.2, 3.0), st.floats(0.0, 2.0)),
)
def test_autograd_equals_the_analytic_weight(
    data: st.DataObject, shape: tuple, mode: str, taus: tuple
) -> None:
    b, t = shape
    floats = st.floats(-3, 3, allow_subnormal=False)
    log_ratio = torch.tensor(data.draw(st.lists(floats, min_size=b * t, max_size=b * t)), dtype=torch.float64)
    adv = torch.tensor(data.draw(st.lists(floats, min_size=b, max_size=b)), dtype=torch.float64)
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=b * t, max_size=b * t))).view(b, t)
    tau_pos, tau_neg = taus[0], taus[0] + taus[1]
    fn = SAPOPolicyLossFn(tau_pos=tau_pos, tau_neg=tau_neg, loss_agg_mode=mode)
    old = torch.randn(b, t, dtype=torch.float64)
    logprob = old + log_ratio.view(b, t)
    advantages = adv[:, None].expand(b, t)
    grad = grad_of_loss(fn, logprob, old_logprob=old, action_mask=mask, advantages=advantages)
    r = torch.exp(log_ratio.view(b, t))
    tau = torch.where(
        advantages > 0, torch.tensor(tau_pos, dtype=torch.float64), torch.tensor(tau_neg, dtype=torch.float64)
    )
    s = torch.sigmoid(tau * (r - 1))
    weight = 4 * s * (1 - s) * r
    counts = mask.sum(-1, keepdim=True).double()
    if mode == "token-mean":
        denom = mask.sum().clamp_min(1).double()
    elif mode == "seq-mean-token-mean":
        denom = counts.clamp_min(1) * (counts > 0).sum().clamp_min(1)
    else:
        denom = (counts > 0).sum().clamp_min(1).double()
    expected = torch.where(mask, -advantages * weight / denom, 0.0)
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)


def test_log_ratio_is_clamped_against_overflow() -> None:
    fn = SAPOPolicyLossFn()
    logprob = torch.tensor([[0.0, 500.0, -500.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    kwargs = {
        "old_logprob": torch.zeros(1, 3),
        "action_mask": mask,
        "advantages": torch.tensor([[1.0, 1.0, -1.0]]),
    }
    grad = grad_of_loss(fn, logprob, **kwargs)
    loss, metrics = fn(logprob, **kwargs)
    assert bool(torch.isfinite(loss))
    assert bool(torch.isfinite(grad).all())
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    assert float(grad[0, 1]) == 0.0
    assert float(grad[0, 2]) == 0.0


def test_nan_at_masked_positions_leaks_nowhere() -> None:
    mask = torch.tensor([[True, True, False], [True, False, False]])
    clean = {
        "logprob": torch.tensor([[-0.5, -1.0, -0.2], [-0.3, -0.1, -0.4]]),
        "old_logprob": torch.tensor([[-0.6, -0.9, -0.2], [-0.2, -0.1, -0.4]]),
        "advantages": torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]]),
    }
    dirty = {k: v.clone() for k, v in clean.items()}
    for value in dirty.values():
        value[~mask] = math.nan
    dirty["old_logprob"][0, 2] = math.inf
    fn = SAPOPolicyLossFn()
    results = []
    for inputs in (clean, dirty):
        lp = inputs["logprob"].clone().requires_grad_(True)
        loss, metrics = fn(
            lp, old_logprob=inputs["old_logprob"], action_mask=mask, advantages=inputs["advantages"]
        )
        loss.backward()
        results.append((loss, metrics, lp.grad))
    (loss_c, metrics_c, grad_c), (loss_d, metrics_d, grad_d) = results
    assert torch.equal(loss_c, loss_d)
    assert torch.equal(grad_c, grad_d)
    assert bool((grad_d[~mask] == 0).all())
    for key in metrics_c:
        assert torch.equal(metrics_c[key], metrics_d[key]), key


def test_metrics_are_detached_zero_dim_tensors_without_host_sync() -> None:
    fn = SAPOPolicyLossFn()
    lp = torch.randn(3, 5, requires_grad=True)
    kwargs = {
        "old_log_probs": torch.randn(3, 5),
        "response_mask": torch.rand(3, 5) > 0.3,
        "advantages": torch.randn(3, 1).expand(3, 5),
    }
    with count_host_syncs() as log:
        loss, metrics = fn(log_prob=lp, **kwargs)
        loss.backward()
    assert len(log) == 0, log.describe()
    assert set(metrics) == {
        "sapo_loss",
        "ppo_kl",
        "avg_soft_gate",
        "avg_ratio",
        "avg_grad_weight",
        "pos_adv_frac",
    }
    for value in metrics.values():
        assert isinstance(value, torch.Tensor)
        assert value.dim() == 0
        assert not value.requires_grad


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(mode: str) -> None:
    torch.manual_seed(0)
    b, t = 6, 7
    lp = torch.randn(b, t, dtype=torch.float64)
    old = lp + 0.3 * torch.randn(b, t, dtype=torch.float64)
    adv = torch.randn(b, 1, dtype=torch.float64).expand(b, t)
    mask = torch.rand(b, t) > 0.4
    mask[2] = False  # a fully masked row
    fn = SAPOPolicyLossFn(loss_agg_mode=mode)
    full_scale = global_normalizers(mask, max_tokens=t)
    full_lp = lp.clone().requires_grad_(True)
    full_loss, _ = fn(full_lp, old_logprob=old, action_mask=mask, advantages=adv, loss_scale=full_scale)
    full_loss.backward()
    parts = [slice(0, 1), slice(1, 4), slice(4, 6)]
    scale = global_normalizers([mask[p] for p in parts], max_tokens=t)
    micro_lp = lp.clone().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    for p in parts:
        loss, _ = fn(
            micro_lp[p], old_logprob=old[p], action_mask=mask[p], advantages=adv[p], loss_scale=scale
        )
        total = total + loss
    total.backward()
    torch.testing.assert_close(total, full_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(micro_lp.grad, full_lp.grad, rtol=1e-12, atol=1e-14)


def test_low_precision_inputs_compute_in_float32() -> None:
    fn = SAPOPolicyLossFn()
    lp = torch.full((2, 3), -0.5, dtype=torch.bfloat16, requires_grad=True)
    loss, metrics = fn(lp, old_logprob=lp.detach(), action_mask=torch.ones(2, 3), advantages=torch.ones(2, 3))
    loss.backward()
    assert loss.dtype == torch.float32
    assert lp.grad is not None
    assert lp.grad.dtype == torch.bfloat16
    assert float(metrics["avg_grad_weight"]) == pytest.approx(1.0)
