"""Importance weights of the rollout correction (verl's ``rollout_is``), vectorised over the batch.

With ``δ_t = old_logprob_t − rollout_logprob_t`` on the response tokens (mask ``m``), clamped to
``±LOG_RATIO_CLAMP``:

* token level: ``ρ_t = exp(δ_t)``;
* sequence level: ``ρ_t = exp(Σ_s m_s δ_s)`` for every token of the sequence (the product of its token
  ratios, clamped in log space).

Then ``truncate`` (TIS): ``w = min(ρ, upper)``; ``mask`` (MIS): ``w = ρ · 1[lower ≤ ρ ≤ upper]``. Level
``None``: every weight is 1 (rejection sampling alone). The weights carry no gradient and are 0 outside
the mask.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from trinity_core.ops import LOG_RATIO_CLAMP

__all__ = ["CorrectionLevel", "CorrectionMode", "rollout_is_weights"]

CorrectionLevel = Literal["token", "sequence"]
CorrectionMode = Literal["truncate", "mask"]


@torch.no_grad()
def rollout_is_weights(
    old_logprob: Tensor,
    rollout_logprob: Tensor,
    mask: Tensor,
    *,
    level: CorrectionLevel | None,
    mode: CorrectionMode,
    upper: float,
    lower: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The ``(B, T)`` weights and the metrics ``rollout_is_mean`` (mean weight over the masked tokens),
    ``rollout_is_clipped_frac`` (share of the masked tokens whose ratio was truncated or masked) and
    ``rollout_is_log_ratio_mean`` (mean ``δ`` over the masked tokens)."""
    valid = mask.bool()
    delta = torch.where(valid, old_logprob.double() - rollout_logprob.double(), 0.0)
    delta = delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if level == "sequence":
        delta = delta.sum(-1, keepdim=True).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).expand_as(delta)
    ratio = delta.exp()
    if level is None:  # rejection sampling only: no importance weights
        clipped = torch.zeros_like(valid)
        weights = torch.ones_like(ratio)
    elif mode == "truncate":
        clipped = ratio > upper
        weights = ratio.clamp(max=upper)
    else:
        clipped = (ratio < lower) | (ratio > upper)
        weights = torch.where(clipped, 0.0, ratio)
    weights = torch.where(valid, weights, 0.0)
    count = valid.sum().clamp(min=1).double()
    metrics = {
        "rollout_is_mean": weights.sum() / count,
        "rollout_is_clipped_frac": (clipped & valid).sum().double() / count,
        "rollout_is_log_ratio_mean": torch.where(
            valid, old_logprob.double() - rollout_logprob.double(), 0.0
        ).sum()
        / count,
    }
    return weights.to(old_logprob.dtype), metrics
