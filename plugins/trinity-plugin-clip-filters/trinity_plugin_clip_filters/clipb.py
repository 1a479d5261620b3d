"""``clipb`` advantage function: :class:`ClipBAdvantageFn` (GRPO + Clip_B token filter)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_plugin_clip_filters.filtering import (
    DEGENERATE_STD,
    clip_metrics,
    population_stats,
    scored_signal,
    store_filter,
)

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["ClipBAdvantageFn", "ClipBArgs"]


class ClipBArgs(ComponentArgs):
    """Arguments of :class:`ClipBAdvantageFn` (defaults = reference)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the group reward std before dividing.")
    mu: float = Field(
        2.5, gt=0, description="Clip negative-advantage tokens whose S is below E[S] - mu * std[S]."
    )


class ClipBAdvantageFn(TrainerAdvantage):
    """Clip_B: GRPO advantages; negative-advantage tokens with an outlying low entropy signal are clipped.

    Clip_B (arXiv:2602.03392). Scores ``A_i`` are GRPO over task groups
    (:mod:`trinity_plugin_clip_filters.grpo`: float64, singletons and zero-variance groups 0). Per
    selected token the entropy signal is ``S = p (H + log p)`` with ``p = exp(logprob)`` and ``H`` the
    column ``entropys``; ``E[S]`` and ``std[S]`` are the mean and population std over all selected
    tokens of the batch. A token is **clipped** iff ``A_i < 0`` and ``S − E[S] < −mu · std[S]``;
    positive- and zero-advantage tokens are always kept, and nothing is clipped when
    ``std[S] < 1e-12``.

    Result (see :mod:`trinity_plugin_clip_filters.filtering`): advantages ``A_i`` on kept tokens and 0
    on clipped ones; ``returns = A_i`` unfiltered; the policy-loss mask ``mask ∧ ¬clipped`` in
    ``batch.extras["policy_loss_mask"]``; the batch's masks are not modified (the reference rewrote
    ``response_mask``; docs/reference-differences.md, ``missing-columns``).

    Log-probs: ``old_logprobs`` when the trainer provides them (the pass that computes ``entropys``),
    else the rollout ``logprobs`` (what the reference reads). Requires the ``entropys`` column: a
    ``KeyError`` says how to provide it. Metrics (0-d tensors): ``frac_clipped``,
    ``frac_clipped_pos`` (always 0; the reference reports 1 when there is no positive token),
    ``frac_clipped_neg``, ``ES``, ``varS``.
    """

    Args: ClassVar[type[ComponentArgs]] = ClipBArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2602.03392"
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask", "logprobs", "entropys")

    epsilon: float
    mu: float

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """GRPO scores, the Clip_B filter, ``policy_loss_mask`` in ``batch.extras``; no host sync."""
        name = type(self).name()
        mask, scores, signal = scored_signal(batch, name, self.epsilon)
        mean, var = population_stats(signal, mask)
        std = var.sqrt()
        outlier = (signal - mean) < -(self.mu * std)
        clipped = mask & (scores < 0)[:, None] & outlier & (std >= DEGENERATE_STD)
        advantages, returns = store_filter(batch, mask, clipped, scores)
        metrics = clip_metrics(clipped, mask, scores)
        metrics["ES"] = mean
        metrics["varS"] = var
        return advantages, returns, metrics
