"""``clipv`` advantage function: :class:`ClipVAdvantageFn` (GRPO + Clip_V capped token filter)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_plugin_clip_filters.filtering import (
    DEGENERATE_STD,
    clip_metrics,
    column,
    population_stats,
    scored_signal,
    store_filter,
)

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["ClipVAdvantageFn", "ClipVArgs", "cap_clipped"]

NECS_HOW = (
    "Clip_V needs a per-token 'necs' column (N, R) in batch.extras, computed by the trainer or a hook; "
    "nothing in trinity-core produces it."
)


class ClipVArgs(ComponentArgs):
    """Arguments of :class:`ClipVAdvantageFn` (defaults = reference ``default_args()``; ``mu`` 8.5, not
    the constructor's 2.0, because configurations receive ``default_args()``)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the group reward std before dividing.")
    mu: float = Field(8.5, gt=0, description="A token violates when D = necs - S exceeds mu * std[D].")
    max_frac: float = Field(
        1e-4,
        ge=0,
        le=1,
        description="Cap on clipped negative-advantage tokens: at most max(floor(max_frac * n), 1).",
    )


def cap_clipped(candidates: Tensor, score: Tensor, limit: Tensor) -> Tensor:
    """The ``limit`` candidates with the largest ``score`` (ties: first in row-major order), as a mask.

    Sync-free top-k with a tensor ``k``: rank the candidates by a stable descending sort and keep
    those ranked below ``limit``.
    """
    flat = torch.where(candidates, score, -torch.inf).reshape(-1)
    order = torch.argsort(flat, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=order.device)
    return candidates & (rank.reshape(candidates.shape) < limit)


class ClipVAdvantageFn(TrainerAdvantage):
    """Clip_V: GRPO advantages; tokens whose necs - S is an outlier are clipped, negatives capped.

    Scores ``A_i`` are GRPO over task groups (:mod:`trinity_plugin_clip_filters.grpo`). Per selected
    token ``S = p (H + log p)`` (``entropys`` column; log-probs ``old_logprobs``, else ``logprobs``),
    ``D = necs − S`` (``necs`` column) and ``std[D]`` the population std over all ``n`` selected tokens.
    A token with ``A_i ≤ 0`` **violates** when ``D > mu · std[D]`` (zero-advantage tokens are tested
    too, as in the reference; positive ones never are). Clipped: every zero-advantage violator and the
    ``k = max(⌊max_frac · n⌋, 1)`` negative-advantage violators with the largest ``D`` (all of them when
    there are at most ``k``; ties by row-major position). Nothing is clipped when ``std[D] < 1e-12``.

    Result as :class:`~trinity_plugin_clip_filters.clipb.ClipBAdvantageFn`: clipped tokens get
    advantage 0, ``batch.extras["policy_loss_mask"] = mask ∧ ¬clipped``, the batch masks are untouched
    (docs/reference-differences.md, ``missing-columns``). Needs ``entropys`` and ``necs`` (produced
    nowhere in the reference): a ``KeyError`` says so. Metrics: ``frac_clipped``, ``frac_clipped_pos``
    (0), ``frac_clipped_neg``, ``stdD``.
    """

    Args: ClassVar[type[ComponentArgs]] = ClipVArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2602.03392"
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask", "logprobs", "entropys", "necs")
    groups_independent: ClassVar[bool] = False
    """The cap on clipped negative-advantage tokens ranks them over the whole batch: which tokens of a
    group are clipped depends on the other groups' advantages."""

    epsilon: float
    mu: float
    max_frac: float

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """GRPO scores, the Clip_V filter, ``policy_loss_mask`` in ``batch.extras``; no host sync."""
        name = type(self).name()
        mask, scores, signal = scored_signal(batch, name, self.epsilon)
        necs = column(batch, "necs", name, NECS_HOW)
        gap = torch.where(mask, necs.to(torch.float64), 0.0) - signal
        _, var = population_stats(gap, mask)
        std = var.sqrt()
        violates = mask & (gap > self.mu * std) & (std >= DEGENERATE_STD)
        n = mask.sum().to(torch.float64)
        limit = torch.floor(self.max_frac * n).clamp_min(1)
        negative = violates & (scores < 0)[:, None]
        clipped = (violates & (scores == 0)[:, None]) | cap_clipped(negative, gap, limit)
        advantages, returns = store_filter(batch, mask, clipped, scores)
        metrics = clip_metrics(clipped, mask, scores)
        metrics["stdD"] = std
        return advantages, returns, metrics
