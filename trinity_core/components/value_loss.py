"""Value losses: how a critic's predictions are fitted to the returns (verl's ``compute_value_loss``).

The trainer calls ``loss(vpreds, values, returns, action_mask, loss_scale=..., loss_agg_mode=...)``
for every micro-batch of a critic update and backpropagates the returned loss into the critic only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import Field
from torch import Tensor

from trinity_core.components._aggregation import LossAggMode, LossAggregation, wrap_loss_call
from trinity_core.components.base import Component, ComponentArgs

__all__ = ["ValueLossFn"]


class ValueLossFn(LossAggregation, Component, ABC):
    """Base of value losses: ``__call__(vpreds, values, returns, action_mask, **kwargs) -> (loss, metrics)``.

    Example (a plain squared error, ``loss = 0.5 * agg((V - G)^2)``)::

        class MSEValueLoss(ValueLossFn):
            \"\"\"Squared error: 0.5 * agg((V - G)^2).\"\"\"

            def __call__(self, vpreds, values, returns, action_mask, **kwargs):
                m = action_mask.bool()
                err = torch.where(m, vpreds - returns, 0.0)
                loss = 0.5 * self.aggregate(err.square(), action_mask)
                return loss, {"vf_loss": loss.detach()}

    The trainer passes ``loss_scale=`` (the optimizer step's global normalizers, as for the policy loss)
    and ``loss_agg_mode=`` (the algorithm's mode, used when this component's own ``loss_agg_mode`` is
    unset); :meth:`aggregate` applies both. Metrics are reported as ``critic/<name>``; the usual ones are
    ``vf_loss``, ``vf_clipfrac`` and ``vpred_mean``.
    """

    kind: ClassVar[str] = "value_loss"

    class Args(ComponentArgs):
        """Arguments shared by value losses."""

        loss_agg_mode: LossAggMode | None = Field(
            None, description="Aggregation mode; None uses the algorithm's loss_agg_mode."
        )

    loss_agg_mode: LossAggMode | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:
            cls.__call__ = wrap_loss_call(cls.__dict__["__call__"])  # type: ignore[method-assign]

    @abstractmethod
    def __call__(
        self, vpreds: Tensor, values: Tensor, returns: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Compute the value loss.

        Args:
            vpreds: the critic's current predictions, ``(B, T)``, with gradient.
            values: the predictions made before the update (the batch's ``values`` column), ``(B, T)``.
            returns: the targets (GAE returns), ``(B, T)``.
            action_mask: tokens that count, ``(B, T)``; other positions may hold anything (NaN too).
            kwargs: other batch tensors.

        Returns:
            ``(loss, metrics)`` with metrics as detached 0-d tensors.
        """
