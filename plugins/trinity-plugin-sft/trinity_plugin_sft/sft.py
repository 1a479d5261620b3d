"""``sft`` policy loss: :class:`SFTLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn.SFTLossFn``)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from trinity_plugin_sft.token_loss import SFTTokenLoss, select_logprob

__all__ = ["SFTLossFn"]


class SFTLossFn(SFTTokenLoss):
    """SFT: negative log-likelihood of the target tokens, L = agg(−log p).

    Per token ``ℓ = −log p``; gradient ``∂L/∂log p_t = −1/N`` (``token-mean`` over ``N`` tokens).
    Argument ``loss_agg_mode`` (default ``token-mean``); metric ``sft_loss`` (the loss, detached).
    """

    metric_name: ClassVar[str] = "sft_loss"

    def token_loss(self, logprob: Tensor, action_mask: Tensor) -> Tensor:
        """``−log p`` at selected tokens, ``0`` elsewhere."""
        return -select_logprob(logprob, action_mask)
