"""Token-level helpers shared by this plugin's losses: masks, input selection and the clamped log-ratio."""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

__all__ = ["LOG_RATIO_CLAMP", "as_bool_mask", "compute_dtype", "masked_log_ratio", "selected"]

LOG_RATIO_CLAMP: Final[float] = 20.0
"""``log r`` is clamped to ``[-20, 20]`` before ``exp``: stale data must not overflow to inf/NaN."""


def as_bool_mask(mask: Tensor) -> Tensor:
    """``mask`` as a bool tensor (any non-zero value selects)."""
    return mask if mask.dtype == torch.bool else mask != 0


def compute_dtype(like: Tensor) -> torch.dtype:
    """The dtype losses compute in: ``like``'s floating dtype promoted to at least float32."""
    return torch.promote_types(like.dtype, torch.float32)


def selected(x: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` (cast to ``dtype``) where ``mask`` holds and exactly 0 elsewhere, broadcast to ``mask``.

    Selecting the *input* keeps NaN/inf stored at masked positions out of every later value and
    gradient (``0 * nan`` would be NaN, and so would ``where(mask, f(x), 0)``'s gradient).
    """
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask, x.to(dtype), zero)


def masked_log_ratio(logprob: Tensor, old_logprob: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``δ = clamp(logprob − old_logprob, −20, 20)`` on selected tokens, 0 elsewhere."""
    delta = selected(logprob, mask, dtype) - selected(old_logprob, mask, dtype)
    return delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
