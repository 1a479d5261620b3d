"""``sppo`` policy loss: :class:`sPPOPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import PolicyInputs, masked_mean

__all__ = ["SPPOArgs", "sPPOPolicyLossFn"]


class SPPOArgs(LossAggArgs):
    """Arguments of :class:`sPPOPolicyLossFn` (names and defaults: trinity-rft 0.6.0's)."""

    epsilon: float = Field(
        0.3,
        gt=0,
        allow_inf_nan=False,
        description="Trust band: a token learns only while 1/(1 + ε) <= π/π_old <= 1 + ε.",
    )


class sPPOPolicyLossFn(StandardPolicyLossFn):  # trinity-rft's class name, lower-case s included
    """sPPO: L = agg(−A · (log π − log π_old) · 1[1/(1+ε) ≤ r ≤ 1+ε]), r = π/π_old (no gradient through r).

    The ``sppo`` loss of the reference (arXiv:2108.05828): a policy gradient on the log-ratio whose
    tokens stop learning once their ratio leaves the symmetric (in log space) trust band
    ``[1/(1+ε), 1+ε]``. Per selected token with ``δ = log π − log π_old``::

        in = |δ| ≤ log(1 + ε)                 (same as 1/(1+ε) ≤ exp(δ) ≤ 1+ε)
        ℓ  = −A · δ · in
        ∂L/∂log π = −A · in · w               (w the aggregation weight; 0 outside the band)

    The band test runs in log space, so no ratio is exponentiated at all: stale data cannot overflow
    (the reference computed ``exp(δ)`` unclamped; both tests agree up to rounding exactly at
    the band's edges).

    Metrics (detached 0-d tensors of this call): ``pg_loss``, ``pg_clipfrac`` (share of tokens outside
    the band).

    Other differences from the reference (trinity-rft 0.6.0): NaN/inf at masked positions reach neither
    loss nor gradient; metrics are tensors (the reference called ``.item()``); aggregation honours the
    trainer's global normalizers (``loss_scale=``).
    """

    Args: ClassVar[type[ComponentArgs]] = SPPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2108.05828"

    epsilon: float
    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``sPPOPolicyLossFn(backend="verl", epsilon=0.3, loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    @property
    def log_band(self) -> float:
        """Half-width of the band in log space: ``log(1 + ε)``."""
        return math.log1p(self.epsilon)

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−A · δ · in)`` over the ``action_mask`` tokens, and metrics."""
        mask, dtype, adv = inputs.mask, inputs.dtype, inputs.advantages
        delta = inputs.delta
        in_band = delta.detach().abs() <= self.log_band
        zero = torch.zeros((), dtype=dtype, device=delta.device)
        loss = self.aggregate(torch.where(in_band, -adv * delta, zero), mask)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.detach(),
                "pg_clipfrac": masked_mean((~in_band).to(dtype), mask),
            }
        return loss, metrics
