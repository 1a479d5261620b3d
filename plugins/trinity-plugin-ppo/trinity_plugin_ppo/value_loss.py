"""Value losses of PPO: ``clipped`` (PPO's clipped value loss) and ``mse``."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, ValueLossFn
from trinity_core.ops import masked_mean

__all__ = ["ClippedValueLoss", "ClippedValueLossArgs", "MSEValueLoss"]


def _selected(mask: Tensor, *xs: Tensor) -> tuple[Tensor, ...]:
    # Zero at masked positions, so NaN/inf there reach neither the loss nor the gradient.
    return tuple(torch.where(mask, x, 0.0) for x in xs)


class ClippedValueLossArgs(ValueLossFn.Args):
    """Arguments of :class:`ClippedValueLoss` (verl's default ``cliprange_value``)."""

    cliprange_value: float = Field(
        0.5, gt=0, description="How far the new prediction may move from the old one before clipping."
    )


class ClippedValueLoss(ValueLossFn):
    """PPO clipped value loss: 0.5 · agg(max((V − G)², (clip(V, V_old ± ε) − G)²)).

    ``V`` are the critic's predictions, ``V_old`` the batch's ``values`` (predicted before the update),
    ``G`` the returns and ``ε`` ``cliprange_value``, as in verl's ``compute_value_loss`` and OpenRLHF's
    ``ValueLoss``. Metrics: ``vf_loss`` (the loss), ``vf_clipfrac`` (share of selected tokens where the
    clipped term is the larger) and ``vpred_mean`` (mean selected prediction).
    """

    Args: ClassVar[type[ComponentArgs]] = ClippedValueLossArgs

    cliprange_value: float

    def __call__(
        self, vpreds: Tensor, values: Tensor, returns: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss, {"vf_loss", "vf_clipfrac", "vpred_mean"})``."""
        m = action_mask.bool()
        vpreds, values, returns = _selected(m, vpreds, values, returns)
        eps = self.cliprange_value
        clipped = torch.clamp(vpreds, values - eps, values + eps)
        unclipped_sq, clipped_sq = (vpreds - returns).square(), (clipped - returns).square()
        loss = 0.5 * self.aggregate(torch.maximum(unclipped_sq, clipped_sq), m)
        return loss, {
            "vf_loss": loss,
            "vf_clipfrac": masked_mean((clipped_sq > unclipped_sq).float(), m),
            "vpred_mean": masked_mean(vpreds, m),
        }


class MSEValueLoss(ValueLossFn):
    """Squared error without clipping: 0.5 · agg((V − G)²).

    ``V`` are the critic's predictions and ``G`` the returns; the old values are not used. Metrics:
    ``vf_loss`` and ``vpred_mean`` (``vf_clipfrac`` is 0: nothing is clipped).
    """

    def __call__(
        self, vpreds: Tensor, values: Tensor, returns: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss, {"vf_loss", "vf_clipfrac", "vpred_mean"})``."""
        m = action_mask.bool()
        vpreds, returns = _selected(m, vpreds, returns)
        loss = 0.5 * self.aggregate((vpreds - returns).square(), m)
        return loss, {
            "vf_loss": loss,
            "vf_clipfrac": torch.zeros((), device=vpreds.device),
            "vpred_mean": masked_mean(vpreds, m),
        }
