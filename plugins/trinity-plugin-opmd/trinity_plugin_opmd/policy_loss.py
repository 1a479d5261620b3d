"""``opmd`` policy loss: :class:`OPMDPolicyLossFn` (trinity-rft 0.6.0)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, PolicyLossFn

__all__ = ["OPMDPolicyLossArgs", "OPMDPolicyLossFn"]


class OPMDPolicyLossArgs(LossAggArgs):
    """Arguments of :class:`OPMDPolicyLossFn` (trinity-rft 0.6.0's ``default_args()``)."""

    tau: float = Field(1.0, ge=0, description="Regularisation temperature: the loss is divided by 1 + tau.")


class OPMDPolicyLossFn(PolicyLossFn):
    """OPMD loss: L = agg(−A · log π) / (1 + τ), a policy gradient scaled by the mirror-descent step.

    Per action token ``t``: ``ℓ_t = −A_t · logp_t``; ``L = agg(ℓ) / (1 + τ)`` with ``agg`` the
    ``loss_agg_mode`` reduction (and the trainer's global normalizers, ``loss_scale=``). The gradient is
    ``∂L/∂logp_t = −A_t / ((1 + τ) N)`` under ``token-mean`` (``N`` action tokens). Inputs are selected by
    the action mask *before* multiplying, so NaN or inf at masked positions reach neither the loss nor
    the gradient. ``select_keys`` (verl): ``response_mask``, ``advantages``. Metric: ``opmd_loss``.
    """

    Args: ClassVar[type[ComponentArgs]] = OPMDPolicyLossArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2501.12599"

    tau: float

    def __call__(  # type: ignore[override]
        self, logprob: Tensor, action_mask: Tensor, advantages: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss, {"opmd_loss": loss})`` for ``(B, T)`` log-probs, action mask and advantages."""
        mask = action_mask if action_mask.dtype == torch.bool else action_mask != 0
        logp = torch.where(mask, logprob, 0.0)
        adv = torch.where(mask, advantages.to(logprob.dtype), 0.0)
        loss = self.aggregate(-adv * logp, mask) / (1.0 + self.tau)
        return loss, {"opmd_loss": loss.detach()}
