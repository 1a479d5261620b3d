"""Shared body of the DPPO losses (``dppo_tv``, ``dppo_kl``): :class:`DPPOPolicyLossBase`."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import PolicyInputs, clamp_log_ratio, masked_mean

__all__ = ["DPPOArgs", "DPPOPolicyLossBase"]


class DPPOArgs(LossAggArgs):
    """Arguments of the DPPO losses (defaults: verl's, whose ``clip_ratio*`` keys carry the thresholds)."""

    clip_divergence: float = Field(
        0.2,
        gt=0,
        allow_inf_nan=False,
        description=(
            "Trust-region threshold δ on the divergence between π and π_old at the sampled token "
            "(dppo_tv: absolute probability shift; dppo_kl: binary KL in nats); not a ratio ε."
        ),
    )
    clip_divergence_low: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="δ_low, the threshold for tokens with A <= 0 (pushed down); None: clip_divergence.",
    )
    clip_divergence_high: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="δ_high, the threshold for tokens with A > 0 (pushed up); None: clip_divergence.",
    )
    clip_ratio_c: float = Field(
        20.0,
        gt=0,
        allow_inf_nan=False,
        description=(
            "Truncated importance sampling bound C: the detached weight is min(r, C) (large C = low bias, "
            "paper section 5.4)."
        ),
    )


class DPPOPolicyLossBase(StandardPolicyLossFn):
    """Base of the DPPO losses: masked REINFORCE with truncated IS, L = agg(−A · sg(min(r, C)) · M · log π).

    Divergence Proximal Policy Optimization (*Rethinking the Trust Region in LLM Reinforcement Learning*,
    arXiv:2602.04879) replaces PPO's ratio window by a trust region on a divergence between ``π`` and
    ``π_old`` at the sampled token, and drops a token's gradient only when it has left that region *in the
    direction its advantage pushes*. Per selected token, with ``δ = clamp(log π − log π_old, ±20)``,
    ``r = exp(δ)``:

        ``M_t`` = :meth:`trust_region_mask` (subclasses: total variation or binary KL),
        ``ℓ_t = −A_t · sg(min(r_t, C)) · M_t · log π_t``,   ``∇ℓ_t = −A_t · min(r_t, C) · M_t ∇log π_t``,

    i.e. PPO's gradient ``A r ∇log π`` inside the region (with the IS weight truncated at ``C`` instead of
    PPO's dual clip) and none outside. Thresholds: ``δ_high`` for ``A > 0``, ``δ_low`` for ``A <= 0``.

    Numerics: inputs are set to 0 at masked positions before any arithmetic (NaN/inf stored there reach
    neither loss nor gradient) and ``M`` is 0 there; the log-ratio is clamped before ``exp``. ``M`` and the
    IS weight carry no gradient. Aggregation: ``loss_agg_mode`` with the trainer's global normalizers
    (``loss_scale=``); tokens outside the region keep counting in the normalizer, as PPO-clipped tokens do.
    Metrics (detached 0-d, no host sync): ``<name>_loss``, ``ppo_kl`` (masked mean of ``−δ``),
    ``pg_clipfrac`` (fraction of tokens outside the trust region) and ``tis_clipfrac`` (fraction inside it
    whose weight was truncated, ``r > C``; verl calls it ``pg_clipfrac_lower``).
    """

    Args: ClassVar[type[ComponentArgs]] = DPPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2602.04879"
    microbatch_invariant: ClassVar[bool] = True
    """Summing micro-batch losses aggregated with the step's global normalizers gives the full batch's."""
    metric_prefix: ClassVar[str] = "dppo"
    """The loss metric is ``<metric_prefix>_loss``."""

    clip_divergence: float
    clip_divergence_low: float | None
    clip_divergence_high: float | None
    clip_ratio_c: float
    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``(backend="verl", clip_divergence=0.2, clip_divergence_low=None, clip_divergence_high=None,
        clip_ratio_c=20.0, loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    @property
    def divergence_low(self) -> float:
        """Resolved ``δ_low``: ``clip_divergence_low``, else ``clip_divergence``."""
        return self.clip_divergence if self.clip_divergence_low is None else self.clip_divergence_low

    @property
    def divergence_high(self) -> float:
        """Resolved ``δ_high``: ``clip_divergence_high``, else ``clip_divergence``."""
        return self.clip_divergence if self.clip_divergence_high is None else self.clip_divergence_high

    @abstractmethod
    def trust_region_mask(self, logprob: Tensor, old_logprob: Tensor, advantages: Tensor) -> Tensor:
        """Bool ``(B, T)``: True where the token may still be updated.

        Called without gradient on finite inputs (0 at masked positions; the result is and-ed with the
        mask afterwards).
        """

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−A · sg(min(r, C)) · M · log π)`` over the ``action_mask`` tokens, and metrics."""
        mask, dtype = inputs.mask, inputs.dtype
        lp, old, adv = inputs.logprob, inputs.old_logprob, inputs.advantages
        with torch.no_grad():
            delta = clamp_log_ratio(lp - old)
            ratio = torch.exp(delta)
            weight = ratio.clamp(max=self.clip_ratio_c)
            inside = self.trust_region_mask(lp.detach(), old, adv) & mask
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        per_token = torch.where(inside, -adv * weight * lp, zero)
        loss = self.aggregate(per_token, mask)
        with torch.no_grad():
            metrics = {
                f"{self.metric_prefix}_loss": loss.detach(),
                "ppo_kl": masked_mean(-delta, mask),
                "pg_clipfrac": masked_mean((~inside).to(dtype), mask),
                "tis_clipfrac": masked_mean((inside & (ratio > self.clip_ratio_c)).to(dtype), mask),
            }
        return loss, metrics
