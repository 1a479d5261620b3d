"""The base of this plugin's KL functions: inputs are zeroed at masked positions first."""

from __future__ import annotations

from abc import ABC
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from trinity_core.components import KLFn

if TYPE_CHECKING:
    from trinity_core.ops import LossScale

__all__ = ["MaskedKLFn", "zero_masked"]


def zero_masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` where ``mask`` is non-zero, exactly ``0`` elsewhere (gradient ``0`` there)."""
    keep = mask if mask.dtype == torch.bool else mask != 0
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))


class MaskedKLFn(KLFn, ABC):
    """A :class:`~trinity_core.components.KLFn` that replaces masked log-probs by ``0`` before estimating.

    Padding may hold NaN or ``±inf`` log-probs. Masking only the *result* keeps the loss finite, but
    backward then multiplies a zero upstream gradient by a NaN local derivative (``0 · nan = nan``) at
    those positions. With every input set to ``0`` there, each estimator sees ``logp = ref = old`` and
    gives ``kl = 0`` with a finite derivative, and ``torch.where`` sends exactly ``0`` gradient back to
    the original inputs. Both the loss and the penalty path do this; the estimators stay masking-free.
    """

    def calculate_kl_loss(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str | None = None,
        old_logprob: Tensor | None = None,
        loss_scale: LossScale | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`KLFn.calculate_kl_loss` on inputs zeroed where ``response_mask`` is 0."""
        return super().calculate_kl_loss(
            zero_masked(logprob, response_mask),
            zero_masked(ref_logprob, response_mask),
            response_mask,
            loss_agg_mode,
            None if old_logprob is None else zero_masked(old_logprob, response_mask),
            loss_scale,
        )

    def apply_kl_penalty_to_reward(
        self,
        token_level_scores: Tensor,
        logprob: Tensor,
        ref_logprob: Tensor | None,
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`KLFn.apply_kl_penalty_to_reward` on log-probs zeroed where ``response_mask`` is 0."""
        return super().apply_kl_penalty_to_reward(
            token_level_scores,
            zero_masked(logprob, response_mask),
            None if ref_logprob is None else zero_masked(ref_logprob, response_mask),
            response_mask,
        )
