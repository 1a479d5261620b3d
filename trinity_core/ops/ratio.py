"""The preamble of a ratio-based policy loss: bool mask, compute dtype, selected inputs, log-ratio, ratio.

Most policy losses start the same way: turn ``action_mask`` into a bool mask, compute in at least
float32, select the current and old log-probs and the advantages under the mask (so NaN or infinity at
masked positions reaches nothing), then ``δ = log π − log π_old``, clamped to ``±LOG_RATIO_CLAMP``, and
``r = exp(δ)``. :func:`policy_inputs` does that once and returns a :class:`PolicyInputs` record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import torch
from torch import Tensor

from trinity_core.ops.select import as_bool_mask, compute_dtype, select

__all__ = ["LOG_RATIO_CLAMP", "PolicyInputs", "clamp_log_ratio", "policy_inputs"]

LOG_RATIO_CLAMP: Final[float] = 20.0
"""``log r`` is clamped to ``[-20, 20]`` before ``exp``: stale data must not overflow to inf/NaN."""


def clamp_log_ratio(delta: Tensor) -> Tensor:
    """``clamp(δ, −LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)``."""
    return delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


@dataclass(frozen=True, eq=False)
class PolicyInputs:
    """A policy loss's inputs, selected under the mask and in the compute dtype.

    Attributes:
        mask: bool ``(B, T)``, True on the tokens that count.
        dtype: the compute dtype (``logprob``'s, at least float32).
        logprob: current log-probs where selected, 0 elsewhere; differentiable like the input.
        old_logprob: the sampling policy's log-probs where selected, 0 elsewhere.
        advantages: advantages broadcast to the mask where selected, 0 elsewhere.
    """

    mask: Tensor
    dtype: torch.dtype
    logprob: Tensor
    old_logprob: Tensor
    advantages: Tensor

    @property
    def delta(self) -> Tensor:
        """``δ = log π − log π_old`` on selected tokens (0 elsewhere), not clamped."""
        return self.logprob - self.old_logprob

    @property
    def log_ratio(self) -> Tensor:
        """``δ`` clamped to ``±LOG_RATIO_CLAMP``."""
        return clamp_log_ratio(self.delta)

    @property
    def ratio(self) -> Tensor:
        """``r = exp(clamp(δ))``: 1 at masked positions."""
        return torch.exp(self.log_ratio)


def policy_inputs(
    logprob: Tensor, old_logprob: Tensor, action_mask: Tensor, advantages: Tensor
) -> PolicyInputs:
    """Select ``logprob``, ``old_logprob`` and ``advantages`` under ``action_mask`` in the compute dtype.

    ``action_mask`` is bool or numeric (non-zero selects); ``advantages`` may be ``(B, T)`` or
    broadcast to it. Each property of the result computes on access, so a loss pays only for what it
    reads, and under ``torch.no_grad()`` when it reads them there.
    """
    mask = as_bool_mask(action_mask)
    dtype = compute_dtype(logprob)
    return PolicyInputs(
        mask=mask,
        dtype=dtype,
        logprob=select(logprob, mask, dtype),
        old_logprob=select(old_logprob, mask, dtype),
        advantages=select(advantages, mask, dtype),
    )
