"""``cispo`` policy loss: :class:`CISPOPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import LOG_RATIO_CLAMP, PolicyInputs, clamp_log_ratio, masked_mean

__all__ = ["LOG_RATIO_CLAMP", "CISPOArgs", "CISPOPolicyLossFn"]


class CISPOArgs(LossAggArgs):
    """Arguments of :class:`CISPOPolicyLossFn` (names and defaults: trinity-rft 0.6.0's)."""

    clip_range_low: float = Field(
        1.0,
        ge=0,
        description=(
            "ε_low: the IS weight is clipped from below at 1 − ε_low; the default 1.0 (or more) imposes no "
            "lower bound, as in the CISPO paper, which tunes only ε_high."
        ),
    )
    clip_range_high: float = Field(0.28, ge=0, description="ε_high: the IS weight is clipped at 1 + ε_high.")
    enable_mask_clip: bool = Field(
        False,
        description=(
            "Also drop tokens PPO would clip (the paper's unified formulation): ratio > 1 + "
            "mask_clip_range_high with A > 0, or ratio < 1 − mask_clip_range_low with A < 0."
        ),
    )
    mask_clip_range_low: float = Field(
        1.0, ge=0, description="Token mask: drop A < 0 tokens with ratio < 1 − mask_clip_range_low."
    )
    mask_clip_range_high: float = Field(
        0.28, ge=0, description="Token mask: drop A > 0 tokens with ratio > 1 + mask_clip_range_high."
    )


class CISPOPolicyLossFn(StandardPolicyLossFn):
    """CISPO: L = agg(−A · sg(clip(r, 1 − ε_low, 1 + ε_high)) · sg(M) · log π), clipping the IS weight.

    Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv:2506.13585). Instead of dropping the
    gradient of clipped tokens as PPO does, CISPO keeps every token's REINFORCE gradient and clips only
    the importance-sampling weight, which is a constant of the gradient. Per selected token, with
    ``r = exp(clamp(log π − log π_old, ±20))``::

        w = clip(r, 1 − ε_low, 1 + ε_high)          (ε_low = 1: no lower bound)
        M = 0 if enable_mask_clip and ((r > 1 + m_hi and A > 0) or (r < 1 − m_lo and A < 0)), else 1
        ℓ = −A · sg(w) · sg(M) · log π

    so ``∂L/∂log π = −A w M`` times the aggregation weight.

    Metrics (detached 0-d tensors of this call): ``cispo_loss``, ``ppo_kl`` (masked mean of
    ``log π_old − log π``, unclamped), ``unmasked_frac`` (masked mean of ``M``).

    Differences from the reference (trinity-rft 0.6.0): ``log r`` is clamped to ±20 before ``exp``
    (``w`` differs only for ``r < e^−20`` with no lower bound, where it is ``e^−20`` instead
    of a smaller number); NaN/inf at masked positions reach neither loss nor gradient; metrics are
    tensors; aggregation honours the trainer's global normalizers (``loss_scale=``).
    """

    Args: ClassVar[type[ComponentArgs]] = CISPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2506.13585"

    clip_range_low: float
    clip_range_high: float
    enable_mask_clip: bool
    mask_clip_range_low: float
    mask_clip_range_high: float
    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``CISPOPolicyLossFn(backend="verl", clip_range_low=1.0, clip_range_high=0.28,
        enable_mask_clip=False, mask_clip_range_low=1.0, mask_clip_range_high=0.28,
        loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−A · sg(w) · sg(M) · log π)`` over the ``action_mask`` tokens, and metrics."""
        mask, current, adv = inputs.mask, inputs.logprob, inputs.advantages
        with torch.no_grad():
            delta = inputs.delta
            ratio = torch.exp(clamp_log_ratio(delta))
            weight = ratio.clamp(1.0 - self.clip_range_low, 1.0 + self.clip_range_high)
            keep = torch.ones_like(ratio)
            if self.enable_mask_clip:
                drop = ((ratio > 1.0 + self.mask_clip_range_high) & (adv > 0)) | (
                    (ratio < 1.0 - self.mask_clip_range_low) & (adv < 0)
                )
                keep = torch.where(drop, torch.zeros_like(keep), keep)
        loss = self.aggregate(-adv * weight * keep * current, mask)
        with torch.no_grad():
            metrics = {
                "cispo_loss": loss.detach(),
                "ppo_kl": masked_mean(-delta, mask),
                "unmasked_frac": masked_mean(keep, mask),
            }
        return loss, metrics
