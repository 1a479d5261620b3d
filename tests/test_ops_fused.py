"""trinity_core.ops.fused: row-sum aggregation, hand-written gradients, the guarded torch.compile."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.ops import LOSS_AGG_MODES, aggregate_loss
from trinity_core.ops import fused as fused_mod
from trinity_core.ops.fused import (
    CompiledKernel,
    aggregate_row_sums,
    aggregate_row_weights,
    loss_with_local_gradient,
    rows_with_gradient,
)

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def dirty_values(seed: int, shape: tuple[int, int], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Random values with NaN, ±inf and -0.0 planted, and a random bool mask."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    special = torch.tensor([math.nan, math.inf, -math.inf, -0.0], dtype=torch.float64)
    spots = torch.rand(shape, generator=g) < 0.2
    picks = special[torch.randint(0, 4, shape, generator=g)]
    x = torch.where(spots, picks, x).to(dtype)
    return x, torch.rand(shape, generator=g) < 0.6


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.dtype == b.dtype and torch.equal(a.contiguous().view(width), b.contiguous().view(width))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(LOSS_AGG_MODES),
    b=st.integers(1, 6),
    t=st.integers(1, 8),
    global_counts=st.booleans(),
    world_size=st.integers(1, 4),
)
def test_aggregate_row_sums_equals_aggregate_loss(
    seed: int, mode: str, b: int, t: int, global_counts: bool, world_size: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) < 0.5
    kwargs: dict[str, object] = {"max_tokens": float(t + 3)}
    if global_counts:
        kwargs.update(
            normalizer=torch.tensor(int(mask.sum()) + 5),
            seq_normalizer=torch.tensor(int(mask.any(-1).sum()) + 2),
            world_size=world_size,
        )
    expected = aggregate_loss(values, mask, mode, **kwargs)  # type: ignore[arg-type]
    selected = torch.where(mask, values, 0.0)
    got = aggregate_row_sums(selected.sum(-1), mask.sum(-1).double(), mode, **kwargs)  # type: ignore[arg-type]
    assert float(got) == pytest.approx(float(expected), rel=1e-12, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(LOSS_AGG_MODES),
    b=st.integers(1, 6),
    t=st.integers(1, 8),
    global_counts=st.booleans(),
    world_size=st.integers(1, 4),
)
def test_aggregate_row_weights_are_the_derivative_of_aggregate_row_sums(
    seed: int, mode: str, b: int, t: int, global_counts: bool, world_size: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    counts = (torch.rand(b, t, generator=g) < 0.5).sum(-1).double()
    kwargs: dict[str, object] = {"max_tokens": float(t + 3)}
    if global_counts:
        kwargs.update(
            normalizer=torch.tensor(int(counts.sum()) + 5),
            seq_normalizer=torch.tensor(int((counts > 0).sum()) + 2),
            world_size=world_size,
        )
    weights = aggregate_row_weights(counts, mode, **kwargs)  # type: ignore[arg-type]
    rows = torch.randn(b, generator=g, dtype=torch.float64, requires_grad=True)
    total = aggregate_row_sums(rows, counts, mode, **kwargs)  # type: ignore[arg-type]
    total.backward()
    assert weights.shape == (b,)
    torch.testing.assert_close(weights, rows.grad, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close((weights * rows).sum(), total, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        aggregate_row_weights(counts, "token_sum")
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate_row_weights(counts, "seq-mean-token-sum-norm")


def test_loss_with_local_gradient_backward_is_row_coef_times_local_grad() -> None:
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    local = torch.randn(3, 4, dtype=torch.float64)
    coef = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    value = torch.tensor(1.5, dtype=torch.float64)
    out = loss_with_local_gradient(x, value, local, coef)
    assert out.shape == ()
    assert torch.equal(out, value)
    assert out.requires_grad
    (3.0 * out).backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, 3.0 * local * coef[:, None], rtol=0, atol=0)
    upstream = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    out = loss_with_local_gradient(x, value, local, coef)
    (grad,) = torch.autograd.grad(out, x, grad_outputs=upstream, create_graph=True)
    torch.testing.assert_close(grad, 2.0 * local * coef[:, None], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward()  # not twice differentiable: an error, not a silently wrong value
    low = torch.randn(2, 3, dtype=torch.bfloat16, requires_grad=True)
    loss_with_local_gradient(low, torch.zeros(()), torch.ones(2, 3), torch.ones(2)).backward()
    assert low.grad is not None
    assert low.grad.dtype == torch.bfloat16


def test_aggregate_row_sums_validates_like_aggregate_loss() -> None:
    rows, counts = torch.ones(2), torch.ones(2)
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        aggregate_row_sums(rows, counts, "token_sum")
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate_row_sums(rows, counts, "seq-mean-token-sum-norm")


def test_rows_with_gradient_backward_is_local_grad_times_upstream() -> None:
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    local = torch.randn(3, 4, dtype=torch.float64)
    rows = torch.randn(3, dtype=torch.float64)
    out = rows_with_gradient(x, rows, local)
    assert torch.equal(out, rows)
    weights = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    (out * weights).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, local * weights[:, None], rtol=0, atol=0)
    low = torch.randn(2, 3, dtype=torch.bfloat16, requires_grad=True)
    rows_with_gradient(low, torch.zeros(2), torch.ones(2, 3)).sum().backward()
    assert low.grad is not None
    assert low.grad.dtype == torch.bfloat16


def test_compiled_kernel_falls_back_to_eager_when_compilation_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_compile(*args: object, **kwargs: object) -> object:
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(fused_mod.torch, "compile", broken_compile)

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    kernel = CompiledKernel(double)
    with caplog.at_level(logging.WARNING, logger="trinity_core.ops.fused"):
        out = kernel(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0))
    assert kernel.compiled is False
    assert "no C++ compiler" in caplog.text
    assert "fused=False" in caplog.text
    assert torch.equal(kernel(torch.ones(2)), torch.full((2,), 2.0))
