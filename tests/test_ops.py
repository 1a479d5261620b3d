"""Tests of trinity_core.ops: masked reductions, loss aggregation with global normalizers, group stats."""

from __future__ import annotations

import math
import random
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import import_reference
from torch import Tensor

from trinity_core.ops import (
    LOSS_AGG_MODES,
    GroupStats,
    LossScale,
    aggregate_loss,
    global_normalizers,
    group_stats,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    segment_count,
    segment_mean,
    segment_std,
    segment_sum,
    segment_var,
)

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_TOKENS = 16.0


def _rel_err(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# --------------------------------------------------------------------------------------------- golden


@pytest.mark.parametrize("device", DEVICES)
def test_masked_reductions_golden(device: str) -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=device)
    m = torch.tensor([[True, True, False], [True, False, False]], device=device)
    assert masked_sum(x, m).tolist() == 7.0  # 1 + 2 + 4
    assert masked_sum(x, m, dim=-1).tolist() == [3.0, 4.0]
    assert masked_mean(x, m).tolist() == pytest.approx(7.0 / 3.0)
    assert masked_mean(x, m, dim=-1).tolist() == [1.5, 4.0]
    assert masked_mean(x, m, dim=0).tolist() == [2.5, 2.0, 0.0]  # column 2 is all masked -> 0
    # float 0/1 masks mean the same as bool masks
    assert masked_mean(x, m.float(), dim=-1).tolist() == [1.5, 4.0]


def test_masked_var_and_whiten_golden() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    m = torch.tensor([True, True, True, False])
    # mean 2, squared deviations 1 + 0 + 1 = 2
    assert masked_var(x, m).tolist() == pytest.approx(1.0)
    assert masked_var(x, m, unbiased=False).tolist() == pytest.approx(2.0 / 3.0)
    w = masked_whiten(x, m, eps=0.0)
    assert w.tolist() == pytest.approx([-1.0, 0.0, 1.0, 0.0])
    w_keep = masked_whiten(x, m, shift_mean=False, eps=0.0)
    assert w_keep.tolist() == pytest.approx([1.0, 2.0, 3.0, 0.0])  # (x - 2) / 1 + 2, masked -> 0


def test_masked_var_whiten_tiny_selections_do_not_raise() -> None:
    x = torch.tensor([5.0, 7.0])
    none = torch.tensor([False, False])
    one = torch.tensor([True, False])
    for unbiased in (True, False):
        assert masked_var(x, none, unbiased=unbiased).tolist() == 0.0
        assert masked_var(x, one, unbiased=unbiased).tolist() == 0.0
    assert masked_whiten(x, none).tolist() == [0.0, 0.0]
    assert masked_whiten(x, one).tolist() == [0.0, 0.0]
    assert masked_whiten(x, one, shift_mean=False).tolist() == [5.0, 0.0]
    assert masked_mean(x, none).tolist() == 0.0


def _golden_batch(device: str = "cpu") -> tuple[Tensor, Tensor]:
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], device=device)
    m = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], device=device).bool()
    return v, m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7.0 / 3.0),  # (1 + 2 + 4) / 3 tokens
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2 non-empty rows
        ("seq-mean-token-mean", 2.75),  # (1.5 + 4) / 2 non-empty rows
        ("seq-mean-token-sum-norm", 7.0 / (2 * 4.0)),  # total / (2 rows * max_tokens 4)
        ("token-sum", 7.0),  # 1 + 2 + 4, no normaliser (verl 0.9.1)
    ],
)
def test_aggregate_loss_golden(device: str, mode: str, expected: float) -> None:
    v, m = _golden_batch(device)
    loss = aggregate_loss(v, m, mode, max_tokens=4.0)
    assert loss.shape == ()
    assert loss.device.type == device
    assert loss.tolist() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7.0 / 14.0 * 2),  # local sum / global tokens * world size
        ("seq-mean-token-sum", 7.0 / 5.0 * 2),
        ("seq-mean-token-mean", 5.5 / 5.0 * 2),
        ("seq-mean-token-sum-norm", 7.0 / (5.0 * 4.0) * 2),
        ("token-sum", 7.0 * 2),  # local sum * world size; no normaliser
    ],
)
def test_aggregate_loss_golden_global(mode: str, expected: float) -> None:
    v, m = _golden_batch()
    scale = LossScale(torch.tensor(14), torch.tensor(5), world_size=2, max_tokens=4.0)
    assert scale.aggregate(v, m, mode).tolist() == pytest.approx(expected)
    direct = aggregate_loss(v, m, mode, normalizer=14, seq_normalizer=5.0, max_tokens=4.0, world_size=2)
    assert direct.tolist() == pytest.approx(expected)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_aggregate_loss_all_masked_is_zero_with_zero_gradient(mode: str) -> None:
    v = torch.randn(3, 4, requires_grad=True)
    m = torch.zeros(3, 4, dtype=torch.bool)
    for kwargs in ({}, {"normalizer": 0, "seq_normalizer": 0}):
        loss = aggregate_loss(v, m, mode, max_tokens=MAX_TOKENS, **kwargs)  # type: ignore[arg-type]
        (grad,) = torch.autograd.grad(loss, v)
        assert loss.tolist() == 0.0
        assert torch.equal(grad, torch.zeros_like(v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_aggregate_loss_keeps_dtype(dtype: torch.dtype) -> None:
    v, m = _golden_batch()
    for mode in LOSS_AGG_MODES:
        loss = aggregate_loss(v.to(dtype), m, mode, max_tokens=4.0)
        assert loss.dtype == dtype


def test_aggregate_loss_errors() -> None:
    v, m = _golden_batch()
    with pytest.raises(
        ValueError, match=r"unknown loss_agg_mode 'token_mean'.*token-mean, seq-mean-token-sum"
    ):
        aggregate_loss(v, m, "token_mean")
    with pytest.raises(ValueError, match="needs max_tokens > 0"):
        aggregate_loss(v, m, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="needs max_tokens > 0"):
        aggregate_loss(v, m, "seq-mean-token-sum-norm", max_tokens=0.0)
    with pytest.raises(ValueError, match=r"values \(3, 3\) and mask \(3, 2\)"):
        aggregate_loss(v, m[:, :2])
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        aggregate_loss(v, m, world_size=0)
    with pytest.raises(ValueError, match="does not broadcast"):
        masked_mean(v, m[:2])
    assert LOSS_AGG_MODES == (
        "token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
        "token-sum",
    )


def test_token_sum_golden_of_the_issue() -> None:
    """verl 0.9.1's ``token-sum``: the masked sum, NaN at masked positions ignored, times ``world_size``."""
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss = aggregate_loss(v, m, "token-sum")
    assert loss.tolist() == 7.0
    (grad,) = torch.autograd.grad(loss, v)
    assert torch.equal(grad, m.to(grad.dtype))
    planted = torch.where(m.bool(), v.detach(), torch.full_like(v, float("nan"))).requires_grad_()
    loss = aggregate_loss(planted, m, "token-sum")
    (grad,) = torch.autograd.grad(loss, planted)
    assert loss.tolist() == 7.0
    assert torch.equal(grad, m.to(grad.dtype))
    assert aggregate_loss(v, m, "token-sum", world_size=4).tolist() == 28.0
    assert aggregate_loss(v, m, "token-sum", normalizer=100, seq_normalizer=9).tolist() == 7.0


@pytest.mark.parametrize("device", DEVICES)
def test_segment_stats_golden(device: str) -> None:
    values = torch.tensor([1.0, 2.0, 3.0, 10.0, 5.0], device=device)
    index = torch.tensor([0, 0, 0, 2, 2], device=device)
    assert segment_count(index, 4).tolist() == [3, 0, 2, 0]
    assert segment_sum(values, index, 4).tolist() == [6.0, 0.0, 15.0, 0.0]
    assert segment_mean(values, index, 4).tolist() == [2.0, 0.0, 7.5, 0.0]
    assert segment_var(values, index, 4).tolist() == [1.0, 0.0, 12.5, 0.0]
    assert segment_var(values, index, 4, unbiased=False).tolist() == pytest.approx([2 / 3, 0.0, 6.25, 0.0])
    assert segment_std(values, index, 4).tolist() == pytest.approx([1.0, 0.0, math.sqrt(12.5), 0.0])
    stats = group_stats(values, index, 4)
    assert stats.count.dtype == torch.int64
    assert stats.mean.dtype == stats.std_unbiased.dtype == stats.std_biased.dtype == torch.float64
    assert stats.std_biased.tolist() == pytest.approx([math.sqrt(2 / 3), 0.0, 2.5, 0.0])
    per = stats.per_element(index)
    assert per.count.tolist() == [3, 3, 3, 2, 2]
    assert per.mean.tolist() == [2.0, 2.0, 2.0, 7.5, 7.5]
    assert per.std_unbiased.tolist() == pytest.approx([1.0, 1.0, 1.0, math.sqrt(12.5), math.sqrt(12.5)])


def test_segment_stats_singletons_and_valid_mask() -> None:
    values = torch.tensor([4.0, float("nan"), 3.0, float("inf"), 9.0])
    index = torch.tensor([0, 0, 1, 1, 2])
    valid = torch.tensor([True, False, True, False, True])
    stats = group_stats(values, index, 3, valid_mask=valid)
    # every group has exactly one valid element: mean = that value, both stds 0 (not NaN)
    assert stats.count.tolist() == [1, 1, 1]
    assert stats.mean.tolist() == [4.0, 3.0, 9.0]
    assert stats.std_unbiased.tolist() == [0.0, 0.0, 0.0]
    assert stats.std_biased.tolist() == [0.0, 0.0, 0.0]
    assert segment_sum(values, index, 3, valid_mask=valid).tolist() == [4.0, 3.0, 9.0]


def test_segment_equal_values_give_exact_zero_where_naive_float64_does_not() -> None:
    values = torch.full((3,), 0.1, dtype=torch.float64)
    naive_mean = values.sum() / 3
    assert naive_mean.tolist() != 0.1  # the hazard the pivot avoids
    index = torch.zeros(3, dtype=torch.int64)
    stats = group_stats(values, index, 1)
    assert stats.mean.tolist() == [0.1]
    assert stats.std_unbiased.tolist() == [0.0]
    assert stats.std_biased.tolist() == [0.0]


def test_segment_errors() -> None:
    values = torch.ones(3)
    with pytest.raises(ValueError, match="index must be a 1-d integer tensor"):
        segment_sum(values, torch.zeros(3), 1)
    with pytest.raises(ValueError, match="values has shape"):
        segment_sum(torch.ones(4), torch.zeros(3, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="valid_mask has shape"):
        group_stats(values, torch.zeros(3, dtype=torch.int64), 1, valid_mask=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_groups must be >= 0"):
        segment_count(torch.zeros(3, dtype=torch.int64), -1)


# ------------------------------------------------------------------------------------------ hypothesis

_finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)


@st.composite
def _masked_arrays(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=7))
    x = draw(hnp.arrays(np.float64, shape, elements=_finite))
    m = draw(hnp.arrays(np.bool_, shape))
    return x, m


@FAST
@given(_masked_arrays())
def test_masked_mean_sum_var_match_numpy(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, m = data
    tx, tm = torch.from_numpy(x), torch.from_numpy(m)
    sel = x[m]
    assert masked_sum(tx, tm).tolist() == pytest.approx(sel.sum(), abs=1e-9)
    assert masked_mean(tx, tm).tolist() == pytest.approx(sel.mean() if sel.size else 0.0, abs=1e-9)
    rows = [x[i][m[i]] for i in range(x.shape[0])]
    expected_rows = [r.mean() if r.size else 0.0 for r in rows]
    assert masked_mean(tx, tm, dim=1).tolist() == pytest.approx(expected_rows, abs=1e-9)
    for ddof in (0, 1):
        expected = sel.var(ddof=ddof) if sel.size > 1 else 0.0
        assert masked_var(tx, tm, unbiased=bool(ddof)).tolist() == pytest.approx(expected, rel=1e-9, abs=1e-6)


@FAST
@given(
    shape=st.tuples(st.integers(1, 400), st.integers(1, 600)),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_masked_mean_dtype_is_the_mean_of_the_converted_values(
    shape: tuple[int, int], seed: int, dtype: torch.dtype
) -> None:
    # Summing in float64 without a float64 copy must give exactly the mean of the float64 copy.
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 10).to(dtype)
    m = torch.rand(shape, generator=gen) > 0.3
    x[~m] = torch.nan  # masked positions never reach the sum
    got = masked_mean(x, m, dim=-1, dtype=torch.float64)
    assert got.dtype == torch.float64
    assert torch.equal(got, masked_mean(x.to(torch.float64), m, dim=-1))
    # The blockwise CPU path (several blocks of rows once rows x cols > 2^16) against the one-shot sum.
    one_shot = torch.where(m, x, 0).sum(dim=-1, dtype=torch.float64) / m.sum(dim=-1).clamp_min(1)
    assert torch.equal(got, one_shot)
    golden = torch.tensor([[1.5, 2.25, 8.0]], dtype=dtype)
    assert masked_mean(golden, torch.tensor([[True, True, False]]), dim=-1, dtype=torch.float64).tolist() == [
        1.875
    ]


@st.composite
def _groups(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    n = draw(st.integers(1, 40))
    num_groups = draw(st.integers(1, 8))
    values = draw(hnp.arrays(np.float64, n, elements=_finite))
    index = draw(hnp.arrays(np.int64, n, elements=st.integers(0, num_groups - 1)))
    valid = draw(hnp.arrays(np.bool_, n))
    return values, index, valid, num_groups


@FAST
@given(_groups())
def test_segment_stats_match_numpy_per_group(data: tuple[np.ndarray, np.ndarray, np.ndarray, int]) -> None:
    values, index, valid, num_groups = data
    stats = group_stats(
        torch.from_numpy(values), torch.from_numpy(index), num_groups, torch.from_numpy(valid)
    )
    for g in range(num_groups):
        sel = values[(index == g) & valid]
        assert stats.count[g].tolist() == sel.size
        assert stats.mean[g].tolist() == pytest.approx(sel.mean() if sel.size else 0.0, abs=1e-9)
        std_u = sel.std(ddof=1) if sel.size > 1 else 0.0
        std_b = sel.std(ddof=0) if sel.size else 0.0
        assert stats.std_unbiased[g].tolist() == pytest.approx(std_u, rel=1e-9, abs=1e-9)
        assert stats.std_biased[g].tolist() == pytest.approx(std_b, rel=1e-9, abs=1e-9)


@FAST
@given(_groups())
def test_segment_stats_without_mask_are_those_of_an_all_true_mask(
    data: tuple[np.ndarray, np.ndarray, np.ndarray, int],
) -> None:
    # No mask skips the selects; the sums must run over the same elements in the same order (same bits).
    values, index, _, num_groups = data
    v, idx = torch.from_numpy(values), torch.from_numpy(index)
    plain = group_stats(v, idx, num_groups)
    masked = group_stats(v, idx, num_groups, torch.ones(idx.shape, dtype=torch.bool))
    for field in ("count", "mean", "std_unbiased", "std_biased"):
        assert torch.equal(getattr(plain, field), getattr(masked, field)), field
    assert torch.equal(segment_sum(v, idx, num_groups), segment_sum(v, idx, num_groups, torch.ones_like(idx)))
    for g in range(num_groups):
        sel = values[index == g]
        assert plain.count[g].tolist() == sel.size
        assert plain.mean[g].tolist() == pytest.approx(sel.mean() if sel.size else 0.0, abs=1e-9)


@FAST
@given(_groups(), st.randoms(use_true_random=False))
def test_segment_stats_permutation_invariant(
    data: tuple[np.ndarray, np.ndarray, np.ndarray, int], rnd: random.Random
) -> None:
    values, index, valid, num_groups = data
    perm = np.arange(values.size)
    rnd.shuffle(perm)  # type: ignore[arg-type]
    a = group_stats(torch.from_numpy(values), torch.from_numpy(index), num_groups, torch.from_numpy(valid))
    b = group_stats(
        torch.from_numpy(values[perm]),
        torch.from_numpy(index[perm]),
        num_groups,
        torch.from_numpy(valid[perm]),
    )
    assert torch.equal(a.count, b.count)
    for field in ("mean", "std_unbiased", "std_biased"):
        torch.testing.assert_close(getattr(a, field), getattr(b, field), rtol=1e-12, atol=1e-9)
    pa = a.per_element(torch.from_numpy(index))
    pb = b.per_element(torch.from_numpy(index[perm]))
    torch.testing.assert_close(pa.mean[perm], pb.mean, rtol=1e-12, atol=1e-9)


@FAST
@given(
    st.floats(-1e6, 1e6, allow_nan=False, width=32),
    st.integers(1, 20),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_zero_variance_groups_are_exact(value: float, size: int, dtype: torch.dtype) -> None:
    values = torch.cat([torch.full((size,), value, dtype=dtype), torch.tensor([1.0, 2.0], dtype=dtype)])
    index = torch.cat([torch.zeros(size, dtype=torch.int64), torch.ones(2, dtype=torch.int64)])
    stats = group_stats(values, index, 2)
    assert stats.mean[0].tolist() == torch.tensor(value, dtype=dtype).double().tolist()
    assert stats.std_unbiased[0].tolist() == 0.0
    assert stats.std_biased[0].tolist() == 0.0
    assert segment_var(values, index, 2)[0].tolist() == 0.0


@FAST
@given(_groups())
def test_per_element_stats_gather_group_stats(data: tuple[np.ndarray, np.ndarray, np.ndarray, int]) -> None:
    values, index, valid, num_groups = data
    idx = torch.from_numpy(index)
    stats = group_stats(torch.from_numpy(values), idx, num_groups, torch.from_numpy(valid))
    per = stats.per_element(idx)
    assert isinstance(per, GroupStats)
    assert torch.equal(per.std_unbiased, stats.std_unbiased[idx])
    assert torch.equal(per.count, stats.count[idx])


# -------------------------------------------------------------------------- NaN at masked positions


def _plant(x: Tensor, mask: Tensor, fill: float) -> Tensor:
    return torch.where(mask, x, torch.full_like(x, fill)).detach().requires_grad_()


def _all_mask_ops() -> dict[str, Callable[[Tensor, Tensor], Tensor]]:
    ops: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "masked_sum": lambda x, m: masked_sum(x, m),
        "masked_mean_rows": lambda x, m: masked_mean(x, m, dim=-1).sum(),
        "masked_var": lambda x, m: masked_var(x, m),
        "masked_whiten": lambda x, m: (masked_whiten(x, m) * torch.arange(x.numel()).view_as(x)).sum(),
        "group_stats": lambda x, m: _group_stats_scalar(x, m),
    }
    for mode in LOSS_AGG_MODES:
        ops[mode] = lambda x, m, mode=mode: aggregate_loss(x, m, mode, max_tokens=MAX_TOKENS)
    return ops


def _group_stats_scalar(x: Tensor, m: Tensor) -> Tensor:
    index = torch.arange(x.numel()) % 3
    flat, valid = x.reshape(-1), m.reshape(-1)
    stats = group_stats(flat, index, 3, valid_mask=valid)
    # variances rather than stds: sqrt has an infinite derivative at a zero variance
    variances = segment_var(flat, index, 3, valid_mask=valid) + segment_var(flat, index, 3, False, valid)
    return stats.mean.sum() + variances.sum() + segment_sum(flat, index, 3, valid_mask=valid).sum()


@FAST
@given(_masked_arrays(), st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e30]))
@pytest.mark.parametrize("op_name", list(_all_mask_ops()))
def test_masked_garbage_changes_neither_value_nor_gradient(
    op_name: str, data: tuple[np.ndarray, np.ndarray], garbage: float
) -> None:
    x, m = data
    mask = torch.from_numpy(m)
    op = _all_mask_ops()[op_name]
    clean = _plant(torch.from_numpy(x), mask, 0.0)
    dirty = _plant(torch.from_numpy(x), mask, garbage)
    out_clean, out_dirty = op(clean, mask), op(dirty, mask)
    (g_clean,) = torch.autograd.grad(out_clean, clean)
    (g_dirty,) = torch.autograd.grad(out_dirty, dirty)
    assert torch.isfinite(out_dirty)
    torch.testing.assert_close(out_dirty, out_clean, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(g_dirty).all()
    torch.testing.assert_close(g_dirty, g_clean, rtol=1e-12, atol=1e-12)
    assert torch.equal(g_dirty[~mask], torch.zeros_like(g_dirty[~mask]))


# ------------------------------------------------------------------ micro-batch and rank invariance


def _batch(seed: int, rows: int, width: int, dim: int = 5) -> tuple[Tensor, Tensor, Tensor]:
    """Features ``(rows, width, dim)``, a right-padded mask with unequal lengths, parameters ``(dim,)``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, dim, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    lengths[rows // 2] = 0  # a fully masked row (e.g. a truncated response)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    theta = torch.randn(dim, generator=gen, dtype=torch.float64)
    return x, mask, theta


def _loss_values(theta: Tensor, x: Tensor) -> Tensor:
    return torch.tanh(x @ theta) + 0.1 * (x @ theta) ** 2


def _trimmed(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Cut the padding of a micro-batch to its own longest row, as a dynamic batcher would."""
    width = max(int(mask.sum(-1).max()), 1)  # test-side host sync is fine
    return x[:, :width], mask[:, :width]


def _whole_batch_grad(x: Tensor, mask: Tensor, theta: Tensor, mode: str) -> Tensor:
    t = theta.clone().requires_grad_()
    (grad,) = torch.autograd.grad(aggregate_loss(_loss_values(t, x), mask, mode, max_tokens=MAX_TOKENS), t)
    return grad


def _micro_batch_grad(chunks: list[tuple[Tensor, Tensor]], theta: Tensor, mode: str) -> Tensor:
    t = theta.clone().requires_grad_()
    scale = global_normalizers([m for _, m in chunks], max_tokens=MAX_TOKENS)
    total = sum(scale.aggregate(_loss_values(t, x), m, mode) for x, m in chunks)
    assert isinstance(total, Tensor)
    (grad,) = torch.autograd.grad(total, t)
    return grad


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(3, 9), st.integers(2, 12))
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_with_global_normalizers_match_whole_batch(
    mode: str, seed: int, rows: int, width: int
) -> None:
    x, mask, theta = _batch(seed, rows, width)
    split = rows // 3 + 1
    chunks = [_trimmed(x[:split], mask[:split]), _trimmed(x[split:], mask[split:])]
    expected = _whole_batch_grad(x, mask, theta, mode)
    assert _rel_err(_micro_batch_grad(chunks, theta, mode), expected) <= 1e-6


def test_local_normalizers_are_not_micro_batch_invariant() -> None:
    """Sanity check that the invariance test can fail: per-micro-batch token-mean gives another gradient."""
    x, mask, theta = _batch(3, 8, 10)
    chunks = [(x[:2], mask[:2]), (x[2:], mask[2:])]
    t = theta.clone().requires_grad_()
    local = sum(aggregate_loss(_loss_values(t, cx), cm) for cx, cm in chunks)
    assert isinstance(local, Tensor)
    (grad,) = torch.autograd.grad(local, t)
    assert _rel_err(grad, _whole_batch_grad(x, mask, theta, "token-mean")) > 1e-3


def test_global_normalizers_counts() -> None:
    m1 = torch.tensor([[1, 1, 0], [0, 0, 0]])
    m2 = torch.tensor([[1, 0], [1, 1], [0, 1]]).bool()
    scale = global_normalizers([m1, m2], max_tokens=8)
    assert scale.num_tokens.tolist() == 6
    assert scale.num_sequences.tolist() == 4  # the all-zero row does not count
    assert scale.world_size == 1
    assert scale.max_tokens == 8
    single = global_normalizers(m2)
    assert (single.num_tokens.tolist(), single.num_sequences.tolist()) == (4, 3)
    with pytest.raises(ValueError, match="got no masks"):
        global_normalizers([])


_DDP_ROWS, _DDP_WIDTH, _DDP_SEED = 10, 9, 1234


def _ddp_rank_chunks(rank: int) -> list[tuple[Tensor, Tensor]]:
    """Rank 0 gets rows [0, 3) in two micro-batches, rank 1 rows [3, 10) in two (unequal shares)."""
    x, mask, _ = _batch(_DDP_SEED, _DDP_ROWS, _DDP_WIDTH)
    bounds = [(0, 1), (1, 3)] if rank == 0 else [(3, 7), (7, 10)]
    return [_trimmed(x[a:b], mask[a:b]) for a, b in bounds]


def _ddp_worker(rank: int, world_size: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        _, _, theta = _batch(_DDP_SEED, _DDP_ROWS, _DDP_WIDTH)
        chunks = _ddp_rank_chunks(rank)
        grads = {}
        for mode in LOSS_AGG_MODES:
            t = theta.clone().requires_grad_()
            scale = global_normalizers([m for _, m in chunks], max_tokens=MAX_TOKENS)
            assert scale.world_size == world_size
            for cx, cm in chunks:  # gradient accumulation: backward per micro-batch
                scale.aggregate(_loss_values(t, cx), cm, mode).backward()
            grad = t.grad
            assert grad is not None
            dist.all_reduce(grad)  # what DDP does: sum, then divide by the world size
            grads[mode] = grad / world_size
        torch.save(grads, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_two_rank_gloo_gradients_match_single_process(tmp_path: Path) -> None:
    world_size = 2
    mp.spawn(_ddp_worker, args=(world_size, _free_port(), str(tmp_path)), nprocs=world_size, join=True)
    x, mask, theta = _batch(_DDP_SEED, _DDP_ROWS, _DDP_WIDTH)
    for rank in range(world_size):
        grads = torch.load(tmp_path / f"rank{rank}.pt")
        for mode in LOSS_AGG_MODES:
            assert _rel_err(grads[mode], _whole_batch_grad(x, mask, theta, mode)) <= 1e-6, (rank, mode)


# ----------------------------------------------------------------------------------------- host sync


@pytest.fixture
def sync_counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Count calls of the Tensor methods that copy device data to the host."""
    calls: dict[str, int] = {}
    names = ("item", "tolist", "__bool__", "cpu", "numpy", "__float__", "__int__")
    for name in names:
        original = getattr(torch.Tensor, name)

        def counting(self: Tensor, *args: object, _name: str = name, _orig: object = original) -> object:
            calls[_name] = calls.get(_name, 0) + 1
            return _orig(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(torch.Tensor, name, counting)
    yield calls
    monkeypatch.undo()


@pytest.mark.parametrize("device", DEVICES)
def test_ops_do_not_sync_with_host(device: str, sync_counter: dict[str, int]) -> None:
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(4, 6, generator=gen).to(device).requires_grad_()
    m = (torch.rand(4, 6, generator=gen) > 0.3).to(device)
    index = torch.tensor([0, 0, 1, 2], device=device)
    outputs = [masked_sum(v, m), masked_mean(v, m, dim=-1).sum(), masked_var(v, m), masked_whiten(v, m).sum()]
    scale = global_normalizers([m[:2], m[2:]], max_tokens=MAX_TOKENS)
    for mode in LOSS_AGG_MODES:
        outputs.append(aggregate_loss(v, m, mode, max_tokens=MAX_TOKENS))
        outputs.append(scale.aggregate(v[:2], m[:2], mode))
    rewards = v.sum(-1)
    stats = group_stats(rewards, index, 3, valid_mask=m[:, 0]).per_element(index)
    outputs += [stats.mean.sum(), stats.std_biased.sum(), stats.count.sum()]
    outputs += [segment_sum(rewards, index, 3).sum(), segment_std(rewards, index, 3).sum()]
    total = torch.stack([o.to(torch.float64) for o in outputs]).sum()
    total.backward()
    assert sync_counter == {}


# ------------------------------------------------------------------------------------------ reference


def _reference_inputs(seed: int) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    lengths = torch.randint(2, 9, (5,), generator=gen)  # no empty rows: where the reference is right
    m = torch.arange(8)[None, :] < lengths[:, None]
    v = torch.where(m, v, torch.full_like(v, float("nan")))
    return v, m


@pytest.mark.reference
@pytest.mark.parametrize("seed", range(5))
def test_matches_reference_where_reference_is_right(seed: int) -> None:
    ref = import_reference("trinity.algorithm.utils")
    v, m = _reference_inputs(seed)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        torch.testing.assert_close(
            aggregate_loss(v, m, mode), ref.aggregate_loss(v, m, mode), rtol=1e-7, atol=0
        )
    # the reference's sum-norm is total / normalizer, not divided by the number of sequences
    # (reference-differences.md#loss-aggregation)
    expected = ref.aggregate_loss(v, m, "seq-mean-token-sum-norm", normalizer=MAX_TOKENS) / v.shape[0]
    ours = aggregate_loss(v, m, "seq-mean-token-sum-norm", max_tokens=MAX_TOKENS)
    torch.testing.assert_close(ours, expected, rtol=1e-7, atol=0)
    for dim in (None, -1, 0):
        torch.testing.assert_close(masked_sum(v, m, dim=dim), ref.masked_sum(v, m, axis=dim))
        torch.testing.assert_close(
            masked_mean(v, m, dim=dim), ref.masked_mean(v, m, axis=dim), rtol=1e-7, atol=0
        )
    for unbiased in (True, False):
        # the reference centres masked NaN too but masks it away again; give it clean values
        clean = torch.where(m, v, 0.0)
        torch.testing.assert_close(masked_var(v, m, unbiased), ref.masked_var(clean, m, unbiased))
    # the reference whitens masked positions too; compare the selected ones
    torch.testing.assert_close(masked_whiten(v, m)[m], ref.masked_whiten(torch.where(m, v, 0.0), m)[m])


@pytest.mark.reference
def test_reference_differs_on_fully_masked_rows() -> None:
    """Documented deviation: the reference counts an all-masked row as a zero-loss sequence."""
    ref = import_reference("trinity.algorithm.utils")
    v, m = _golden_batch()
    assert ref.aggregate_loss(v, m, "seq-mean-token-mean").tolist() == pytest.approx(5.5 / 3)
    assert aggregate_loss(v, m, "seq-mean-token-mean").tolist() == pytest.approx(5.5 / 2)
