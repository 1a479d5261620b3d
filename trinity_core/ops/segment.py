"""Per-group (segment) statistics in float64, vectorised with ``scatter_add_`` / ``scatter_reduce``.

Inputs are flat: ``values`` ``(N,)`` (e.g. rewards), ``index`` ``(N,)`` integer group ids in
``[0, num_groups)`` (e.g. ``ExperienceBatch.group_index``) and an optional boolean ``valid_mask`` ``(N,)``
that drops elements (e.g. missing rewards) from every statistic. All statistics are float64 on the
device of ``values``; counts are int64. Ids are not range-checked (that would need a host sync): an id
outside ``[0, num_groups)`` raises inside ``scatter_add_`` on CPU and is a device-side assert on CUDA.

Sums are ``scatter_add_`` (on CPU the same element order as ``index_add_``, so the same bits, and
faster) and per-element gathers ``index_select`` (faster than ``t[index]``).

Policies:

* empty group (no valid element): count 0, sum 0, mean 0, variance 0;
* group of one: mean = the value, biased and unbiased variance 0 (not NaN);
* all valid values of a group equal: mean equals that value and variance is exactly 0. Variances use
  deviations from a per-group pivot (the group maximum) and two passes, so equal values give deviations
  that are exactly 0 — a plain float64 mean of e.g. three 0.1 is ``0.1 + 2⁻⁵⁶``, not ``0.1``.

Invalid elements may hold NaN or inf: they reach neither the statistics nor their gradients.
Summation order on CUDA is not deterministic (atomics), so results may differ in the last bits there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trinity_core.ops.select import select

__all__ = [
    "GroupStats",
    "group_stats",
    "segment_count",
    "segment_mean",
    "segment_std",
    "segment_sum",
    "segment_var",
]


def _check(values: Tensor | None, index: Tensor, num_groups: int, valid_mask: Tensor | None) -> None:
    """Validate shapes and ``num_groups`` (metadata only, no host sync)."""
    if index.dim() != 1 or index.dtype.is_floating_point or index.dtype == torch.bool:
        raise ValueError(
            f"segment ops: index must be a 1-d integer tensor of group ids, got shape {tuple(index.shape)} "
            f"and dtype {index.dtype}; use ExperienceBatch.group_index"
        )
    if num_groups < 0:
        raise ValueError(f"segment ops: num_groups must be >= 0, got {num_groups}")
    for name, other in (("values", values), ("valid_mask", valid_mask)):
        if other is not None and other.shape != index.shape:
            raise ValueError(
                f"segment ops: {name} has shape {tuple(other.shape)} but index has {tuple(index.shape)}; "
                "pass one entry per element"
            )


def _valid(index: Tensor, valid_mask: Tensor | None) -> Tensor:
    if valid_mask is None:
        return torch.ones(index.shape, dtype=torch.bool, device=index.device)
    return valid_mask if valid_mask.dtype == torch.bool else valid_mask != 0


def _select(x: Tensor, valid: Tensor | None, fill: float = 0.0) -> Tensor:
    """:func:`~trinity_core.ops.select`, or ``x`` itself when there is no mask (every element counts)."""
    return x if valid is None else select(x, valid, fill=fill)


def _zeros(num_groups: int, like: Tensor) -> Tensor:
    return torch.zeros(num_groups, dtype=like.dtype, device=like.device)


def segment_count(index: Tensor, num_groups: int, valid_mask: Tensor | None = None) -> Tensor:
    """``count_g = #{i : index_i = g, valid_i}`` as int64 ``(num_groups,)``."""
    _check(None, index, num_groups, valid_mask)
    ones = _valid(index, valid_mask).to(torch.int64)
    return _zeros(num_groups, ones).scatter_add_(0, index.long(), ones)


def segment_sum(values: Tensor, index: Tensor, num_groups: int, valid_mask: Tensor | None = None) -> Tensor:
    """``sum_g = Σ_{i: index_i = g, valid_i} values_i`` in float64, shape ``(num_groups,)``."""
    _check(values, index, num_groups, valid_mask)
    valid = None if valid_mask is None else _valid(index, valid_mask)
    v = _select(values.to(torch.float64), valid)
    return _zeros(num_groups, v).scatter_add_(0, index.long(), v)


def _moments(
    values: Tensor, index: Tensor, num_groups: int, valid_mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Return ``(count, mean, ss)`` per group, ``ss = Σ (v − mean)²``, by a pivoted two-pass scheme.

    Without ``valid_mask`` every element counts and the selects are skipped (``where`` with an all-True
    mask is the identity, so the bits are those of the masked computation).
    """
    _check(values, index, num_groups, valid_mask)
    idx = index.long()
    valid = None if valid_mask is None else _valid(index, valid_mask)
    v = _select(values.to(torch.float64), valid)
    ones = torch.ones_like(idx) if valid is None else valid.to(torch.int64)
    count = _zeros(num_groups, idx).scatter_add_(0, idx, ones)
    # The pivot is a member's value, so equal members give deviations of exactly 0.
    pivot = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=v.device)
    pivot = pivot.scatter_reduce(0, idx, _select(v, valid, -torch.inf), reduce="amax")
    pivot = torch.where(count > 0, pivot, 0.0).detach()
    d = _select(v - pivot.index_select(0, idx), valid)
    n = count.to(torch.float64).clamp_min(1)
    mean_d = _zeros(num_groups, d).scatter_add_(0, idx, d) / n
    dev = _select(d - mean_d.index_select(0, idx), valid)
    ss = _zeros(num_groups, dev).scatter_add_(0, idx, dev * dev)
    return count, pivot + mean_d, ss


def _variance(count: Tensor, ss: Tensor, unbiased: bool) -> Tensor:
    """``ss / max(count − ddof, 1)``: 0 for empty groups and groups of one."""
    return ss / (count - int(unbiased)).clamp_min(1).to(torch.float64)


def segment_mean(values: Tensor, index: Tensor, num_groups: int, valid_mask: Tensor | None = None) -> Tensor:
    """``mean_g = sum_g / count_g`` in float64 (``0`` for an empty group; exact for equal values)."""
    return _moments(values, index, num_groups, valid_mask)[1]


def segment_var(
    values: Tensor,
    index: Tensor,
    num_groups: int,
    unbiased: bool = True,
    valid_mask: Tensor | None = None,
) -> Tensor:
    """``var_g = Σ (v − mean_g)² / (count_g − 1)`` if ``unbiased`` else ``/ count_g``, float64.

    Groups with fewer valid elements than ``1 + unbiased`` get ``0`` (documented policy, never NaN).
    """
    count, _, ss = _moments(values, index, num_groups, valid_mask)
    return _variance(count, ss, unbiased)


def segment_std(
    values: Tensor,
    index: Tensor,
    num_groups: int,
    unbiased: bool = True,
    valid_mask: Tensor | None = None,
) -> Tensor:
    """``std_g = sqrt(segment_var)``, float64; exactly ``0`` for groups of equal values or of one."""
    return segment_var(values, index, num_groups, unbiased, valid_mask).sqrt()


@dataclass(frozen=True, eq=False)
class GroupStats:
    """Statistics of groups, float64 except ``count`` (int64); all tensors have the same length.

    Per group (length ``num_groups``) from :func:`group_stats`, or per element (length ``N``) after
    :meth:`per_element`.
    """

    count: Tensor
    mean: Tensor
    std_unbiased: Tensor
    std_biased: Tensor

    def per_element(self, index: Tensor) -> GroupStats:
        """Gather each element's group statistics: ``field[index]`` for every field."""
        idx = index.long()
        fields = (self.count, self.mean, self.std_unbiased, self.std_biased)
        return GroupStats(*(t.index_select(0, idx) for t in fields))


def group_stats(
    values: Tensor, index: Tensor, num_groups: int, valid_mask: Tensor | None = None
) -> GroupStats:
    """Count, mean, unbiased std (``N − 1``) and biased std (``N``) of every group in one pass.

    See the module docstring for the empty, singleton and equal-value policies; use
    ``group_stats(...).per_element(index)`` to broadcast them back to the elements.
    """
    count, mean, ss = _moments(values, index, num_groups, valid_mask)
    return GroupStats(
        count=count,
        mean=mean,
        std_unbiased=_variance(count, ss, True).sqrt(),
        std_biased=_variance(count, ss, False).sqrt(),
    )
