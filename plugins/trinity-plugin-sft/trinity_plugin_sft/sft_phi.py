"""``sft_phi`` policy loss: :class:`SFTPhiLossFn` (trinity-rft's ``SFTPhiLossFn``)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs
from trinity_core.ops import masked_mean
from trinity_plugin_sft.token_loss import SFTTokenLoss, select_logprob

__all__ = ["SFTPhiArgs", "SFTPhiLossFn", "phi_function"]


def phi_function(token_prob: Tensor) -> Tensor:
    """``φ(p) = p (1 − p)``: largest (1/4) at ``p = 1/2``, zero for certain and for impossible tokens."""
    return token_prob * (1 - token_prob)


class SFTPhiArgs(LossAggArgs):
    """Arguments of :class:`SFTPhiLossFn`."""

    cutoff_prob: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description=(
            "Tokens whose probability exceeds this get no gradient (their log-prob is clamped at "
            "log(cutoff_prob)); 1.0 disables the cut-off."
        ),
    )


class SFTPhiLossFn(SFTTokenLoss):
    """SFT weighted by φ(p) = p(1 − p) (CHORD): L = agg(−min(log p, log c) · sg(φ(p))).

    ``p = exp(log p)`` is taken before clamping; ``c = cutoff_prob``. The weight ``φ`` damps tokens the
    model is already sure of (``p → 1``) and tokens it finds impossible (``p → 0``); tokens with
    ``p > c`` get no gradient and contribute the constant ``−log(c) · φ(p)``. Gradient
    ``∂L/∂log p_t = −φ(p_t) · [p_t ≤ c] / N`` (``token-mean``).

    Difference from the reference: with ``cutoff_prob = 0`` every token is cut off and the loss is exactly
    ``0`` (the reference accepts 0 but its call fails on ``math.log(0)``, "math domain error").
    Metrics: ``sft_phi_loss`` and ``cutoff_frac`` (fraction of selected tokens above the cut-off).
    """

    Args: ClassVar[type[ComponentArgs]] = SFTPhiArgs
    metric_name: ClassVar[str] = "sft_phi_loss"
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2508.11408"

    cutoff_prob: float

    def token_loss(self, logprob: Tensor, action_mask: Tensor) -> Tensor:
        """``−min(log p, log c) · sg(φ(p))`` at selected tokens, ``0`` elsewhere."""
        lp = select_logprob(logprob, action_mask)
        with torch.no_grad():
            weight = phi_function(torch.exp(lp))
        if self.cutoff_prob <= 0.0:
            return lp * 0.0  # every token is above a zero cut-off: no value, no gradient (still attached)
        if self.cutoff_prob < 1.0:
            lp = lp.clamp(max=math.log(self.cutoff_prob))
        return -lp * weight

    def __call__(  # type: ignore[override]
        self, logprob: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(token_loss)`` and metrics ``sft_phi_loss``, ``cutoff_frac``."""
        loss, metrics = super().__call__(logprob, action_mask)
        mask = action_mask if action_mask.dtype == torch.bool else action_mask != 0
        with torch.no_grad():
            above = torch.exp(select_logprob(logprob, mask)) > self.cutoff_prob
            metrics["cutoff_frac"] = masked_mean(above.to(torch.float32), mask)
        return loss, metrics
