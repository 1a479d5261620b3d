"""Entropy regularisers (reference ``trinity.algorithm.entropy_loss_fn``).

The trainer subtracts the returned loss from the policy loss: ``L = L_pg - entropy_loss``, so a positive
``entropy_coef`` rewards entropy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import Field
from torch import Tensor

from trinity_core.components._aggregation import LossAggMode, LossAggregation, wrap_loss_call
from trinity_core.components.base import Component, ComponentArgs

__all__ = ["EntropyLossFn"]


class EntropyLossFn(LossAggregation, Component, ABC):
    """Base of entropy losses: ``__call__(entropy, action_mask, **kwargs) -> (loss, metrics)``.

    Example (the usual regulariser, ``loss = coef * agg(H, mask)``)::

        class DefaultEntropyLossFn(EntropyLossFn):
            \"\"\"Entropy bonus: entropy_coef * agg(H).\"\"\"

            def __call__(self, entropy, action_mask, **kwargs):
                value = self.aggregate(entropy, action_mask)
                return value * self.entropy_coef, {"entropy_loss": value.detach()}

    The trainer may pass ``loss_agg_mode=`` (the algorithm's mode, used when this component's own
    ``loss_agg_mode`` is unset) and ``loss_scale=`` (global normalizers); :meth:`aggregate` applies both.
    """

    kind: ClassVar[str] = "entropy_loss"

    class Args(ComponentArgs):
        """Arguments shared by entropy losses."""

        entropy_coef: float = Field(0.0, description="Weight of the entropy term (positive favours entropy).")
        loss_agg_mode: LossAggMode | None = Field(
            None, description="Aggregation mode; None uses the algorithm's loss_agg_mode."
        )

    entropy_coef: float
    loss_agg_mode: LossAggMode | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:
            cls.__call__ = wrap_loss_call(cls.__dict__["__call__"])  # type: ignore[method-assign]

    @abstractmethod
    def __call__(
        self, entropy: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Compute the entropy loss.

        Args:
            entropy: per-token entropy of the current policy, ``(B, T)``.
            action_mask: tokens that count, ``(B, T)``.
            kwargs: other batch tensors (e.g. ``expert_mask``).

        Returns:
            ``(loss, metrics)`` with metrics as detached 0-d tensors.
        """
