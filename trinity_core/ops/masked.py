"""Masked reductions over padded tensors.

Every function selects elements with a boolean ``mask`` (any non-zero value counts as selected) and uses
``torch.where`` on the *values* before any arithmetic, so a NaN or infinity stored at a masked position
reaches neither the result nor the gradient (multiplying by the mask would give ``0 * nan = nan``).

Nothing here synchronises with the host: no ``.item()``, no Python ``bool`` of a tensor, no branching on
tensor values. Results live on the device and in the floating dtype of ``x`` (or the ``dtype`` asked
for). Empty selections have documented finite results instead of raising (trinity-rft 0.6.0's
``masked_var`` raises on them).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trinity_core.ops.select import as_bool_mask, select

__all__ = ["masked_mean", "masked_sum", "masked_var", "masked_whiten"]

Dim = int | tuple[int, ...] | None


def _as_bool_mask(x: Tensor, mask: Tensor, where: str) -> Tensor:
    """Return ``mask`` as a bool tensor broadcast to ``x``'s shape, with a readable error on mismatch."""
    try:
        return as_bool_mask(mask).expand(x.shape)
    except RuntimeError:
        raise ValueError(
            f"{where}: mask of shape {tuple(mask.shape)} does not broadcast to values of shape "
            f"{tuple(x.shape)}; pass a mask with the same shape as the values (e.g. action_mask for (B, T))"
        ) from None


def _count(mask: Tensor, dim: Dim, dtype: torch.dtype) -> Tensor:
    """Number of selected elements along ``dim`` as ``dtype``.

    Counted in int32 when no count can overflow it: a bool sum converts its whole input to the
    accumulation type first, and the narrower type converts faster.
    """
    count_dtype = torch.int32 if mask.numel() < 2**31 else torch.int64
    return mask.sum(dim=dim, dtype=count_dtype).to(dtype)


def masked_sum(x: Tensor, mask: Tensor, dim: Dim = None) -> Tensor:
    """Sum of the selected elements: ``Σ_{m=1} x`` over ``dim`` (all dimensions when ``None``).

    ``mask`` must broadcast to ``x``. An empty selection sums to ``0``.
    """
    m = _as_bool_mask(x, mask, "masked_sum")
    return select(x, m).sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: Dim = None, dtype: torch.dtype | None = None) -> Tensor:
    """Mean of the selected elements: ``Σ_{m=1} x / max(Σ m, 1)`` over ``dim``.

    An empty selection (all masked) gives exactly ``0``, not NaN. Unlike the reference, no ``1e-8`` is
    added to the count, so the mean of selected elements is exact. ``dtype`` (default: ``x``'s) is the
    dtype of the sum and the result: ``masked_mean(x, m, dtype=torch.float64)`` is the float64 mean of a
    float32 ``x``, bitwise that of its float64 copy.
    """
    m = _as_bool_mask(x, mask, "masked_mean")
    total = select(x, m).sum(dim=dim, dtype=dtype)
    return total / _count(m, dim, total.dtype).clamp_min(1)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of all selected elements (a 0-d tensor), computed in two passes.

    ``μ = masked_mean(x)``, ``ss = Σ_{m=1} (x − μ)²``, ``n = Σ m``;
    ``var = ss / (n − 1)`` when ``unbiased`` (Bessel), else ``ss / n``.

    Policy for tiny selections (the reference raises instead): the denominator is clamped to at least 1,
    so ``n = 0`` gives ``0`` and ``n = 1`` gives ``0`` (a single value has no spread) in both modes.
    """
    m = _as_bool_mask(x, mask, "masked_var")
    xs = select(x, m)
    n = _count(m, None, xs.dtype)
    mean = xs.sum() / n.clamp_min(1)
    centered = select(xs - mean, m)
    ss = (centered * centered).sum()
    return ss / (n - 1 if unbiased else n).clamp_min(1)


def masked_whiten(
    x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8, unbiased: bool = True
) -> Tensor:
    """Standardise the selected elements and zero the rest.

    ``out = (x − μ) / sqrt(var + eps)`` (plus ``μ`` again when ``shift_mean`` is False), with ``μ`` and
    ``var`` from :func:`masked_mean` and :func:`masked_var` over all selected elements; ``eps`` sits
    inside the square root as in the reference. Masked positions of the output are exactly ``0`` (trinity-rft
    0.6.0 leaves them whitened). With fewer than two selected elements ``var = 0``, so
    ``out = (x − μ)·eps^-1/2`` on the selected element, which is ``0`` for a single element (``μ`` when
    ``shift_mean`` is False).
    """
    m = _as_bool_mask(x, mask, "masked_whiten")
    xs = select(x, m)
    mean = masked_mean(xs, m)
    var = masked_var(xs, m, unbiased=unbiased)
    out = (xs - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return select(out, m)
