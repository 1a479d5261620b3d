"""Golden values and gradients of every estimator, derived by hand from the formulas.

Notation: ``logr = logp − ref``, ``u = ref − logp = −logr``. Inputs are float64 so values are exact up
to rounding of ``exp``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_kl import (
    AbsFn,
    AbsPlusFn,
    K1Fn,
    K1PlusFn,
    K2Fn,
    K3Fn,
    K3PlusFn,
    LowVarKLFn,
    LowVarKLPlusFn,
)
from trinity_plugin_kl.estimators import k2, k3, low_var_kl, straight_through

E = math.e

# (logp, ref) pairs and their log-ratio logr = logp - ref.
PAIRS = [(-1.0, -2.0), (-2.0, -1.0), (-0.5, -0.5), (-4.0, -1.0), (-1.0, -31.0)]
LOGR = [1.0, -1.0, 0.0, -3.0, 30.0]

# name -> (class, values at PAIRS, d/dlogp at PAIRS), written out from the formulas.
GOLDEN = {
    "k1": (K1Fn, [1.0, -1.0, 0.0, -3.0, 30.0], [1.0, 1.0, 1.0, 1.0, 1.0]),
    "k2": (K2Fn, [0.5, 0.5, 0.0, 4.5, 450.0], [1.0, -1.0, 0.0, -3.0, 30.0]),
    # k3 = e^u - 1 - u; d/dlogp = 1 - e^u.
    "k3": (
        K3Fn,
        [1 / E, E - 2, 0.0, E**3 - 4, math.exp(-30) + 29],
        [1 - 1 / E, 1 - E, 0.0, 1 - E**3, 1 - math.exp(-30)],
    ),
    # clamp(e^u - u - 1, -10, 10) with u clamped to [-20, 20]: e^3 - 4 = 16.09 and e^-20 + 19 saturate.
    "low_var_kl": (LowVarKLFn, [1 / E, E - 2, 0.0, 10.0, 10.0], [1 - 1 / E, 1 - E, 0.0, 0.0, 0.0]),
    "abs": (AbsFn, [1.0, 1.0, 0.0, 3.0, 30.0], [1.0, -1.0, 0.0, -1.0, 1.0]),
    # straight-through: the value of the base estimator, the gradient of k2 (= logr).
    "k1+": (K1PlusFn, [1.0, -1.0, 0.0, -3.0, 30.0], LOGR),
    "abs+": (AbsPlusFn, [1.0, 1.0, 0.0, 3.0, 30.0], LOGR),
    "k3+": (K3PlusFn, [1 / E, E - 2, 0.0, E**3 - 4, math.exp(-30) + 29], LOGR),
    "low_var_kl+": (LowVarKLPlusFn, [1 / E, E - 2, 0.0, 10.0, 10.0], LOGR),
}


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.tensor([p for p, _ in PAIRS], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([r for _, r in PAIRS], dtype=torch.float64, requires_grad=True)
    return logp, ref


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_value_and_gradient_match_the_formula(name: str) -> None:
    cls, values, grads = GOLDEN[name]
    logp, ref = _inputs()
    kl = cls().calculate_kl(logp, ref)
    torch.testing.assert_close(kl, torch.tensor(values, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    kl.sum().backward()
    assert logp.grad is not None
    assert ref.grad is not None
    torch.testing.assert_close(logp.grad, torch.tensor(grads, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    # Every estimator is a function of logp - ref only: d/dref = -d/dlogp.
    torch.testing.assert_close(ref.grad, -logp.grad, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_dtype_and_shape_are_kept(name: str) -> None:
    cls = GOLDEN[name][0]
    logp = torch.full((2, 3), -1.0, dtype=torch.bfloat16)
    kl = cls().calculate_kl(logp, logp - 1)
    assert kl.dtype == torch.bfloat16
    assert kl.shape == (2, 3)


finite = st.floats(-40.0, 5.0, allow_nan=False, allow_infinity=False)
vectors = st.lists(st.tuples(finite, finite), min_size=1, max_size=16)


@settings(max_examples=60, deadline=None)
@given(vectors)
def test_straight_through_value_is_exact_and_gradient_is_k2s(pairs: list[tuple[float, float]]) -> None:
    logp0 = torch.tensor([p for p, _ in pairs], dtype=torch.float64)
    ref0 = torch.tensor([r for _, r in pairs], dtype=torch.float64)
    for plus, base in ((K1PlusFn, K1Fn), (AbsPlusFn, AbsFn), (K3PlusFn, K3Fn), (LowVarKLPlusFn, LowVarKLFn)):
        logp = logp0.clone().requires_grad_()
        ref = ref0.clone().requires_grad_()
        value = plus().calculate_kl(logp, ref)
        # Bit-exact: k2 - sg(k2) is exactly 0 for finite inputs.
        assert torch.equal(value, base().calculate_kl(logp0, ref0))
        value.sum().backward()
        logp_k2 = logp0.clone().requires_grad_()
        ref_k2 = ref0.clone().requires_grad_()
        K2Fn().calculate_kl(logp_k2, ref_k2).sum().backward()
        assert logp.grad is not None
        assert logp_k2.grad is not None
        assert ref.grad is not None
        assert ref_k2.grad is not None
        assert torch.equal(logp.grad, logp_k2.grad)
        assert torch.equal(ref.grad, ref_k2.grad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-50.0, 50.0, allow_nan=False), min_size=1, max_size=32))
def test_k3_is_non_negative_and_low_var_kl_is_k3_clamped(logr_list: list[float]) -> None:
    logr = torch.tensor(logr_list, dtype=torch.float64)
    exact = k3(logr)
    clamped = low_var_kl(logr)
    assert bool((exact >= 0).all())
    assert bool(((clamped >= 0) & (clamped <= 10)).all())
    # Where |u| <= 20 the only clamp is the value clamp at 10.
    inside = logr.abs() <= 20
    torch.testing.assert_close(clamped[inside], exact[inside].clamp(max=10.0), rtol=1e-12, atol=1e-12)


def test_straight_through_helper_keeps_value_and_discards_its_gradient() -> None:
    logr = torch.tensor([0.5, -2.0], dtype=torch.float64, requires_grad=True)
    value = (3 * logr).exp()  # any differentiable value: its gradient must vanish
    out = straight_through(value, logr)
    assert torch.equal(out, value.detach())
    out.sum().backward()
    assert logr.grad is not None
    assert torch.equal(logr.grad, logr.detach())  # d/dlogr of 1/2 logr^2
    assert k2(torch.tensor(2.0)).item() == 2.0


def test_k3_is_accurate_in_float32_near_the_reference() -> None:
    # u = ref - logp small: exp(u) - 1 - u cancels (float32 gives ±1.66e-8 for u = ±1e-4, where k3 is
    # 5.0e-9: a 230% error, of either sign); expm1(u) - u errs by at most ~eps·|u|, < 0.3% of k3 here.
    u = torch.tensor([1e-4, -1e-4, 3e-3, -2e-2], dtype=torch.float32)
    logr = -u
    exact = (torch.expm1(u.double()) - u.double()).float()
    for fn in (K3Fn(), LowVarKLFn(), K3PlusFn(), LowVarKLPlusFn()):
        got = fn.calculate_kl(logr, torch.zeros_like(logr))
        torch.testing.assert_close(got, exact, rtol=5e-3, atol=0)
        assert bool((got > 0).all())
