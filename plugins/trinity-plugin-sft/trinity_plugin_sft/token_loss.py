"""Shared machinery of the SFT losses: a per-token loss, aggregated over the selected tokens."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, PolicyLossFn

__all__ = ["SFTTokenLoss", "select_logprob"]


def select_logprob(logprob: Tensor, mask: Tensor) -> Tensor:
    """``logprob`` at the selected positions and ``0`` elsewhere.

    Selecting the *input* first keeps NaN/inf stored at padded positions out of every later product, so
    neither the loss nor its gradient can see them (``0 * nan = nan`` otherwise).
    """
    selected = mask if mask.dtype == torch.bool else mask != 0
    return torch.where(selected, logprob, torch.zeros((), dtype=logprob.dtype, device=logprob.device))


class SFTTokenLoss(PolicyLossFn):
    """Base of the SFT losses: ``L = agg(ℓ(logp))`` with a per-token loss ``ℓ`` from :meth:`token_loss`.

    Subclasses implement :meth:`token_loss` and name their metric in ``metric_name``. The loss reads only
    the response mask (``select_keys == ["response_mask"]`` for verl). :meth:`token_loss` is public so a
    mixed loss (``trinity-plugin-mix``) can aggregate it over a subset of rows.
    """

    Args: ClassVar[type[ComponentArgs]] = LossAggArgs
    metric_name: ClassVar[str] = "sft_loss"
    """Name of the metric holding the aggregated loss."""

    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``Cls(backend="verl", loss_agg_mode="token-mean", ...)``: the trinity-rft signature."""
        super().__init__(backend=backend, **args)

    @abstractmethod
    def token_loss(self, logprob: Tensor, action_mask: Tensor) -> Tensor:
        """Per-token loss ``(B, T)``: finite everywhere, exactly ``0`` with zero gradient where
        ``action_mask`` is False, whatever ``logprob`` holds there."""

    def __call__(  # type: ignore[override]
        self, logprob: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(token_loss(logprob), action_mask)`` (``loss_agg_mode``, the trainer's ``loss_scale``).

        Args:
            logprob: current log-probs of the target tokens ``(B, T)``.
            action_mask: ``(B, T)``, True / non-zero on the tokens that are trained on.
        """
        loss = self.aggregate(self.token_loss(logprob, action_mask), action_mask)
        return loss, {self.metric_name: loss.detach()}
