"""trinity_core.ops.fast: the exact CPU speed kernels equal the plain torch they replace, bit for bit."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.ops import masked_mean, select
from trinity_core.ops.fast import as_float, bit_select, mask_bits, row_sums, scratch_buffers, split_views
from trinity_core.ops.fast import bit_choose as choose

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


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1), dtype=st.sampled_from(DTYPES), b=st.integers(1, 5), t=st.integers(1, 9)
)
def test_select_and_choose_are_torch_where_bit_for_bit(seed: int, dtype: torch.dtype, b: int, t: int) -> None:
    x, mask = dirty_values(seed, (b, t), dtype)
    y, _ = dirty_values(seed + 1, (b, t), dtype)
    zero = torch.zeros((), dtype=dtype)
    assert same_bits(bit_select(x, mask), torch.where(mask, x, zero))
    assert same_bits(bit_select(x, mask, mask_bits(mask, dtype)), torch.where(mask, x, zero))
    assert same_bits(choose(mask, x, y), torch.where(mask, x, y))
    numeric = mask.to(torch.float32) * 3.0
    assert torch.equal(mask_bits(numeric, dtype), mask_bits(mask, dtype))
    assert torch.equal(as_float(mask, dtype), mask.to(dtype))


def test_select_broadcasts_and_its_gradient_is_masked() -> None:
    mask = torch.tensor([[True, False, True], [False, False, True]])
    adv = torch.tensor([[2.0], [math.nan]])
    assert same_bits(bit_select(adv, mask), torch.where(mask, adv, 0.0))
    x = torch.tensor([[1.0, math.nan, 3.0], [math.inf, 5.0, 6.0]], requires_grad=True)
    out = bit_select(x, mask)
    (out * torch.tensor([[1.0, math.nan, 2.0], [math.nan, 4.0, 3.0]])).sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]]))
    leaf = torch.tensor([[2.0], [3.0]], requires_grad=True)
    bit_select(leaf, mask).sum().backward()
    assert leaf.grad is not None
    assert torch.equal(leaf.grad, torch.tensor([[2.0], [1.0]]))


def test_select_rejects_mismatched_bits() -> None:
    mask = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="mask_bits"):
        bit_select(torch.ones(2, 2), mask, mask_bits(mask, torch.float64))


def test_scratch_buffers_are_reused_per_thread_and_grow() -> None:
    first = scratch_buffers(2, (3, 4), torch.float32, torch.device("cpu"))
    assert [tuple(b.shape) for b in first] == [(3, 4), (3, 4)]
    assert first[0].data_ptr() != first[1].data_ptr()
    again = scratch_buffers(2, (2, 5), torch.float32, torch.device("cpu"))
    assert [b.data_ptr() for b in again] == [b.data_ptr() for b in first]  # same memory, new shape
    bigger = scratch_buffers(3, (8, 8), torch.float32, torch.device("cpu"))
    assert len(bigger) == 3
    assert all(b.shape == (8, 8) and b.is_contiguous() for b in bigger)
    assert len({b.data_ptr() for b in bigger}) == 3
    other: list[torch.Tensor] = []
    thread = threading.Thread(target=lambda: other.extend(scratch_buffers(1, (8, 8), torch.float32, "cpu")))
    thread.start()
    thread.join()
    assert other[0].data_ptr() not in {b.data_ptr() for b in bigger}  # each thread has its own
    assert scratch_buffers(1, (2,), torch.float64, torch.device("cpu"))[0].dtype == torch.float64


@pytest.mark.parametrize("dtype", DTYPES)
def test_plain_select_is_torch_where(dtype: torch.dtype) -> None:
    x, mask = dirty_values(3, (5, 7), dtype)
    assert same_bits(select(x, mask), torch.where(mask, x, torch.zeros((), dtype=dtype)))
    assert same_bits(select(x, mask.to(torch.int64), torch.float64), torch.where(mask, x.double(), 0.0))
    assert same_bits(select(x, mask), bit_select(x, mask))


@pytest.mark.parametrize("shape", [(3, 5), (300, 700), (1, 1)])
def test_row_sums_equal_the_plain_float64_row_sums(shape: tuple[int, int]) -> None:
    x, mask = dirty_values(4, shape, torch.float32)
    x = torch.nan_to_num(x, nan=1.5, posinf=2.5, neginf=-2.5)
    plain = torch.where(mask, x, 0.0).sum(dim=-1, dtype=torch.float64)
    assert same_bits(row_sums(x, mask, torch.float64), plain)
    expected = plain / mask.sum(dim=-1).clamp_min(1).double()
    assert same_bits(masked_mean(x, mask, dim=-1, dtype=torch.float64), expected)


@pytest.mark.parametrize("sizes", [3, [2, 5, 0, 5]])
def test_split_views_are_the_views_of_torch_split(sizes: int | list[int]) -> None:
    x = torch.arange(12.0)
    got, expected = split_views(x, sizes), torch.split(x, sizes)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)
        assert a.data_ptr() == b.data_ptr()
