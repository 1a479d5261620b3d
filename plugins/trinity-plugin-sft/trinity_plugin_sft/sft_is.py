"""``sft_is`` policy loss: :class:`SFTISLossFn` (trinity-rft's ``SFTISLossFn``)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from trinity_plugin_sft.token_loss import SFTTokenLoss, select_logprob

__all__ = ["SFTISLossFn"]


class SFTISLossFn(SFTTokenLoss):
    """SFT with importance sampling: L = agg(−log p · sg(p)), p = exp(log p).

    Each token's NLL gradient is weighted by its own (stop-gradient) probability, so tokens the model
    already finds unlikely move less: ``∂L/∂log p_t = −p_t / N`` (``token-mean``). Argument
    ``loss_agg_mode``; metric ``sft_is_loss``.
    """

    metric_name: ClassVar[str] = "sft_is_loss"

    def token_loss(self, logprob: Tensor, action_mask: Tensor) -> Tensor:
        """``−log p · sg(p)`` at selected tokens, ``0`` elsewhere."""
        lp = select_logprob(logprob, action_mask)
        with torch.no_grad():
            weight = torch.exp(lp)
        return -lp * weight
