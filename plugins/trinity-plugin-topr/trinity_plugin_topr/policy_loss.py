"""``topr`` policy loss: :class:`TOPRPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import LOG_RATIO_CLAMP, PolicyInputs, masked_mean

__all__ = ["LOG_RATIO_CLAMP", "TOPRArgs", "TOPRPolicyLossFn"]


class TOPRArgs(LossAggArgs):
    """Arguments of :class:`TOPRPolicyLossFn` (names and defaults: trinity-rft 0.6.0's)."""

    advantage_threshold: float = Field(
        0.0,
        allow_inf_nan=False,
        description=(
            "Tokens with advantage (reward) <= this threshold are the 'negative' ones whose update is "
            "truncated by α = clip(r, 0, 1); tokens above it get α = 1 (plain SFT-like update)."
        ),
    )


class TOPRPolicyLossFn(StandardPolicyLossFn):
    """TOPR: L = agg(−sg(α)·A·log π), α = clip(π/π_old, 0, 1) if A ≤ threshold else 1.

    Tapered Off-Policy REINFORCE (Le Roux et al., arXiv:2503.14286). Positive examples (``A >
    advantage_threshold``) get the untruncated REINFORCE/SFT update ``−A ∇log π``; negative ones are
    weighted by the truncated importance ratio ``α = clip(r, 0, 1)``, ``r = exp(clamp(log π − log π_old,
    ±20))``, which tapers their push-down as the policy already assigns them less mass than the
    behaviour policy. ``α`` is a constant of the gradient (stop-gradient), so per token
    ``∂L/∂log π = −α A w`` with ``w`` the aggregation weight. ``A`` may be raw rewards (the ``topr`` preset
    uses the ``reinforce`` advantage) or baselined advantages.

    Metrics (detached 0-d tensors of this call): ``topr_loss``, ``avg_alpha`` (masked mean of ``α``),
    ``avg_ratio`` (masked mean of ``r``).

    Differences from the reference (trinity-rft 0.6.0): ``log r`` is clamped to ±20 before ``exp``
    (``α`` and the loss are unchanged, since ``clip(r, 0, 1)`` only differs below ``e^−20``,
    but ``avg_ratio`` no longer overflows to inf); NaN/inf at masked positions reach neither loss nor
    gradient; metrics are tensors; aggregation honours the trainer's global normalizers
    (``loss_scale=``).
    """

    Args: ClassVar[type[ComponentArgs]] = TOPRArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2503.14286"

    advantage_threshold: float
    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``TOPRPolicyLossFn(backend="verl", advantage_threshold=0.0, loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−sg(α)·A·log π)`` over the masked tokens (A: advantages or rewards), and metrics."""
        mask, current, adv = inputs.mask, inputs.logprob, inputs.advantages
        with torch.no_grad():
            ratio = inputs.ratio
            negative = adv <= self.advantage_threshold
            alpha = torch.where(negative, ratio.clamp(0.0, 1.0), torch.ones_like(ratio))
        loss = self.aggregate(-alpha * adv * current, mask)
        with torch.no_grad():
            metrics = {
                "topr_loss": loss.detach(),
                "avg_alpha": masked_mean(alpha, mask),
                "avg_ratio": masked_mean(ratio, mask),
            }
        return loss, metrics
