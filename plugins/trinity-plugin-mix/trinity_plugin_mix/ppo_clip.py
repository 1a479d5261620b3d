"""The PPO clipped surrogate with dual clip, per token, as MIX applies it to the rollout rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import torch
from torch import Tensor

__all__ = ["DUAL_CLIP_C", "LOG_RATIO_CLAMP", "PPOTokenTerms", "ppo_clip_terms"]

LOG_RATIO_CLAMP: Final[float] = 20.0
"""``log r`` is clamped to ``[-20, 20]`` before ``exp``, as in the reference PPO loss."""
DUAL_CLIP_C: Final[float] = 3.0
"""Dual-clip constant ``c`` of the reference PPO loss inside MIX (not configurable there either)."""


@dataclass(frozen=True)
class PPOTokenTerms:
    """Per-token pieces of the PPO loss, all ``(B, T)`` and finite everywhere.

    Attributes:
        loss: the per-token loss ``L`` (below).
        log_ratio: ``δ = clamp(logp − old, −20, 20)``.
        clipped: ``L2 > L1`` (the clip is active).
        clipped_lower: ``C1 > L3`` and ``A < 0`` (the dual clip is active).
    """

    loss: Tensor
    log_ratio: Tensor
    clipped: Tensor
    clipped_lower: Tensor


def ppo_clip_terms(
    logprob: Tensor, old_logprob: Tensor, advantages: Tensor, clip_low: float, clip_high: float
) -> PPOTokenTerms:
    """PPO clip with dual clip, per token.

    ``r = exp(δ)``, ``L1 = −A r``, ``L2 = −A clip(r, 1 − clip_low, 1 + clip_high)``, ``C1 = max(L1, L2)``,
    ``L3 = −A c`` (``c = DUAL_CLIP_C``), ``L = min(L3, C1)`` where ``A < 0`` else ``C1``.
    The inputs must already be finite (select them with the row/token mask first).
    """
    log_ratio = (logprob - old_logprob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss1 = -advantages * ratio
    loss2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clip1 = torch.maximum(loss1, loss2)
    loss3 = -advantages * DUAL_CLIP_C
    negative = advantages < 0
    loss = torch.where(negative, torch.minimum(loss3, clip1), clip1)
    return PPOTokenTerms(loss, log_ratio, loss2 > loss1, (clip1 > loss3) & negative)
