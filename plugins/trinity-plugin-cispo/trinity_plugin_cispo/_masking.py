"""Selecting inputs before arithmetic, shared by this plugin's losses."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["as_bool_mask", "selected"]


def as_bool_mask(mask: Tensor) -> Tensor:
    """``mask`` as a bool tensor (any non-zero value selects)."""
    return mask if mask.dtype == torch.bool else mask != 0


def selected(x: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` (cast to ``dtype``, broadcast to ``mask``) where ``mask`` holds and exactly 0 elsewhere.

    Selecting the *input* keeps NaN/inf stored at masked positions out of every later value and gradient
    (``0 * nan`` would be NaN).
    """
    zero = torch.zeros((), dtype=dtype, device=x.device)
    return torch.where(mask, x.to(dtype), zero)
