"""trinity_core.ops.select and trinity_core.ops.policy_inputs: selection under a mask and the
policy-loss preamble, against their formulas."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.ops import LOG_RATIO_CLAMP, as_bool_mask, compute_dtype, policy_inputs, select

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only


def test_select_zeroes_masked_positions_and_their_gradient() -> None:
    x = torch.tensor([[1.0, math.nan], [math.inf, -2.0]], requires_grad=True)
    mask = torch.tensor([[1, 0], [0, 1]])
    out = select(x, mask)
    assert torch.equal(out, torch.tensor([[1.0, 0.0], [0.0, -2.0]]))
    out.sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))


def test_select_casts_broadcasts_and_fills() -> None:
    adv = torch.tensor([[2.0], [3.0]], dtype=torch.bfloat16)
    mask = torch.tensor([[True, False, True], [False, True, True]])
    out = select(adv, mask, torch.float64)
    assert out.dtype == torch.float64
    assert torch.equal(out, torch.tensor([[2.0, 0.0, 2.0], [0.0, 3.0, 3.0]], dtype=torch.float64))
    assert torch.equal(select(adv, mask, fill=-math.inf)[0], torch.tensor([2.0, -math.inf, 2.0]).bfloat16())


def test_mask_and_dtype_helpers() -> None:
    assert as_bool_mask(torch.tensor([0.0, 0.5, -1.0])).tolist() == [False, True, True]
    bool_mask = torch.tensor([True])
    assert as_bool_mask(bool_mask) is bool_mask
    assert compute_dtype(torch.zeros(1, dtype=torch.bfloat16)) == torch.float32
    assert compute_dtype(torch.zeros(1, dtype=torch.float64)) == torch.float64


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), spread=st.floats(0.0, 40.0))
def test_policy_inputs_follow_the_formulas(seed: int, spread: float) -> None:
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(4, 6, generator=g)
    logprob = (old + spread * torch.randn(4, 6, generator=g)).requires_grad_(True)
    mask = (torch.rand(4, 6, generator=g) < 0.6).to(torch.int64)
    adv = torch.randn(4, 1, generator=g)
    # Garbage at masked positions must not show anywhere.
    old = torch.where(mask.bool(), old, math.nan)
    inputs = policy_inputs(logprob, old, mask, adv)
    m = mask.bool()
    assert torch.equal(inputs.mask, m)
    assert inputs.dtype == torch.float32
    zero = torch.zeros(())
    delta = torch.where(m, logprob.detach() - old, zero)
    assert torch.equal(inputs.delta.detach(), delta)
    assert torch.equal(inputs.log_ratio.detach(), delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    assert torch.equal(inputs.ratio.detach(), torch.exp(delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)))
    assert torch.equal(inputs.advantages, torch.where(m, adv.expand(4, 6), zero))
    assert torch.isfinite(inputs.ratio).all()
    inputs.ratio.sum().backward()
    assert logprob.grad is not None
    assert torch.isfinite(logprob.grad).all()
    assert torch.equal(logprob.grad[~m], torch.zeros(int((~m).sum())))
