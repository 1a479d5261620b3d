"""The masked, clamped log-ratio shared by the ratio-based losses of this plugin."""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

__all__ = ["LOG_RATIO_CLAMP", "as_bool_mask", "masked_log_ratio", "selected"]

LOG_RATIO_CLAMP: Final[float] = 20.0
"""``log r`` is clamped to ``[-20, 20]`` before ``exp``: stale data must not overflow to inf/NaN."""


def as_bool_mask(mask: Tensor) -> Tensor:
    """``mask`` as a bool tensor (any non-zero value selects)."""
    return mask if mask.dtype == torch.bool else mask != 0


def selected(x: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` (cast to ``dtype``) where ``mask`` holds and exactly 0 elsewhere.

    Selecting the *input* keeps NaN/inf stored at masked positions out of every later value and
    gradient (``0 * nan`` would be NaN).
    """
    zero = torch.zeros((), dtype=dtype, device=x.device)
    return torch.where(mask, x.to(dtype), zero)


def masked_log_ratio(logprob: Tensor, old_logprob: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``δ = clamp(logprob − old_logprob, −20, 20)`` on selected tokens, 0 elsewhere."""
    delta = selected(logprob, mask, dtype) - selected(old_logprob, mask, dtype)
    return delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
