"""Selecting values under a mask: the one helper every loss and reduction uses before arithmetic.

``select(x, mask)`` is ``torch.where(mask, x, 0)``. Selecting the *inputs* of a computation (rather
than multiplying its result by the mask) keeps NaN or infinity stored at masked positions out of every
later value and gradient: ``0 * nan`` is NaN, and so is the gradient of ``where(mask, f(x), 0)`` when
``f`` is not finite at a masked position.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["as_bool_mask", "compute_dtype", "select"]


def as_bool_mask(mask: Tensor) -> Tensor:
    """``mask`` as a bool tensor: any non-zero value selects (``mask`` itself when already bool)."""
    return mask if mask.dtype == torch.bool else mask != 0


def compute_dtype(like: Tensor) -> torch.dtype:
    """The dtype losses compute in: ``like``'s dtype promoted to at least float32."""
    return torch.promote_types(like.dtype, torch.float32)


def select(x: Tensor, mask: Tensor, dtype: torch.dtype | None = None, fill: float = 0.0) -> Tensor:
    """``x`` (cast to ``dtype`` when given) where ``mask`` holds and ``fill`` (default exactly 0) elsewhere.

    ``x`` and ``mask`` broadcast together; ``mask`` is bool or numeric (non-zero selects). The result
    is differentiable in ``x`` with gradient ``where(mask, grad, 0)``, so a NaN stored at a masked
    position reaches no gradient.
    """
    values = x if dtype is None else x.to(dtype)
    other = torch.full((), fill, dtype=values.dtype, device=values.device)
    return torch.where(as_bool_mask(mask), values, other)
