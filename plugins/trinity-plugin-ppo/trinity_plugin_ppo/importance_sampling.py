"""``importance_sampling`` policy loss: :class:`ImportanceSamplingLossFn`."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import PolicyInputs, masked_mean

__all__ = ["ImportanceSamplingArgs", "ImportanceSamplingLossFn"]


class ImportanceSamplingArgs(LossAggArgs):
    """Arguments of :class:`ImportanceSamplingLossFn`: only ``loss_agg_mode`` (default ``token-mean``)."""


class ImportanceSamplingLossFn(StandardPolicyLossFn):
    """Unclipped importance-sampling loss L = agg(−A·r), r = exp(clamp(log π − log π_old, ±20)).

    The gradient is ``−A·r·∇log π`` per token: the off-policy-corrected policy gradient without PPO's
    trust region, meant for on-policy distillation where the advantage is a per-token teacher signal.

    Metrics (detached 0-d tensors, no host synchronisation): ``pg_loss``, ``ratio/mean`` (masked mean of
    ``r``) and ``approx_kl`` (masked mean of ``−log r``). Differences from the reference (trinity-rft
    0.6.0): NaN/inf at masked positions never reach the loss or gradient; the trainer's global
    normalizers (``loss_scale=``) are honoured; metrics are tensors, not Python floats.
    """

    Args: ClassVar[type[ComponentArgs]] = ImportanceSamplingArgs

    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``ImportanceSamplingLossFn(backend="verl", loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−A·r)`` over the ``action_mask`` tokens, and metrics."""
        mask = inputs.mask
        delta = inputs.log_ratio
        ratio = torch.exp(delta)
        loss = self.aggregate(-inputs.advantages * ratio, mask)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.detach(),
                "ratio/mean": masked_mean(ratio, mask),
                "approx_kl": masked_mean(-delta, mask),
            }
        return loss, metrics
