"""``geo_mean`` policy loss: :class:`GMPOPolicyLossFn` (Geometric-Mean Policy Optimization, as verl's
``geo_mean``)."""

from __future__ import annotations

from typing import Any, ClassVar, Final

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, LossAggMode, StandardPolicyLossFn
from trinity_core.ops import PolicyInputs, masked_mean

__all__ = ["DEFAULT_LOG_CLIP_RANGE", "GEO_LOG_RATIO_CLAMP", "GMPOArgs", "GMPOPolicyLossFn"]

DEFAULT_LOG_CLIP_RANGE: Final[float] = 0.4
"""Log-space clip bound used when neither the one-sided bound nor ``clip_range`` is set: token ratios are
clipped to ``[e^−0.4, e^0.4]`` (the GMPO paper's setting)."""

GEO_LOG_RATIO_CLAMP: Final[float] = 20.0
"""The log of the geometric-mean ratio is clamped to ``[-20, 20]`` before ``exp`` (overflow on stale data;
verl leaves its clamp commented out)."""


class GMPOArgs(LossAggArgs):
    """Arguments of :class:`GMPOPolicyLossFn`."""

    clip_range: float | None = Field(
        None,
        ge=0,
        description=(
            "Symmetric log-space clip ε: token log-ratios are clipped to [−ε_low, ε_high]; used for a side "
            "whose own bound is None. With all three None: 0.4 (GMPO paper)."
        ),
    )
    clip_range_low: float | None = Field(
        None, ge=0, description="ε_low: token log-ratios are clipped from below at −ε_low; None: clip_range."
    )
    clip_range_high: float | None = Field(
        None, ge=0, description="ε_high: token log-ratios are clipped from above at ε_high; None: clip_range."
    )
    loss_agg_mode: LossAggMode | None = Field(  # type: ignore[assignment]  # widened to allow None
        "seq-mean-token-mean",
        description=(
            "How the per-sequence loss (broadcast over the sequence's tokens) is reduced: "
            "seq-mean-token-mean = the mean over sequences (GMPO); None: the mode the trainer passes."
        ),
    )


def _resolve(own: float | None, shared: float | None) -> float:
    if own is not None:
        return own
    return DEFAULT_LOG_CLIP_RANGE if shared is None else shared


class GMPOPolicyLossFn(StandardPolicyLossFn):
    """GMPO: maximise A_b times the geometric mean of the sign-aware clipped token ratios of sequence b.

    Geometric-Mean Policy Optimization (Zhao et al., arXiv:2507.20673; verl ``geo_mean``). Per row ``b``
    with ``n_b`` selected tokens, ``δ_t = log π_t − log π_old,t``, sequence advantage
    ``A_b = (1/n_b) Σ_t A_t`` and ``σ = sign(A_b)``::

        δ̃_t  = σ · min(σ δ_t, σ clip(δ_t, −ε_low, ε_high))    (pessimistic clip, in log space)
        ρ_b   = exp(clamp((1/n_b) Σ_t δ̃_t, −20, 20))           (geometric mean of the clipped ratios)
        ℓ_b   = −A_b ρ_b
        L     = agg(ℓ_b broadcast over b's tokens)              (seq-mean-token-mean: mean_b ℓ_b)

    so ``∂ℓ_b/∂log π_t = −A_b ρ_b / n_b`` on tokens whose log-ratio is not cut and 0 on cut ones (for
    ``A_b > 0``: ``δ_t > ε_high``; for ``A_b < 0``: ``δ_t < −ε_low``). The geometric mean makes one
    outlier token move the sequence objective far less than the arithmetic mean of GRPO, which is why a
    wider clip (0.4 in log space) is stable.

    Metrics (detached 0-d tensors): ``pg_loss``; ``pg_clipfrac`` (share of tokens cut with ``A_b > 0``);
    ``pg_clipfrac_lower`` (cut with ``A_b < 0``); ``ppo_kl`` (masked mean of ``−δ``);
    ``geo_ratio_mean`` (mean ``ρ_b`` over rows with a selected token).

    Differences from verl's ``geo_mean``: the sign and the clip use the sequence advantage ``A_b``
    (identical for sequence-level advantages, the only case verl supports); the log geometric mean is
    clamped against overflow; the loss goes through ``loss_agg_mode`` and the trainer's global
    normalizers (verl returns ``mean(ℓ_b)`` per micro-batch, ignoring both); empty rows contribute
    nothing; ``pg_clipfrac*`` count only tokens that are actually cut.
    """

    Args: ClassVar[type[ComponentArgs]] = GMPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2507.20673"

    clip_range: float | None
    loss_agg_mode: str | None

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``GMPOPolicyLossFn(backend="verl", clip_range=None, clip_range_low=None, clip_range_high=None,
        loss_agg_mode="seq-mean-token-mean")``."""
        super().__init__(backend=backend, **args)

    @property
    def clip_range_low(self) -> float:
        """Resolved log-space ``ε_low``: ``clip_range_low``, else ``clip_range``, else 0.4."""
        args: GMPOArgs = self.args  # type: ignore[assignment]
        return _resolve(args.clip_range_low, args.clip_range)

    @property
    def clip_range_high(self) -> float:
        """Resolved log-space ``ε_high``: ``clip_range_high``, else ``clip_range``, else 0.4."""
        args: GMPOArgs = self.args  # type: ignore[assignment]
        return _resolve(args.clip_range_high, args.clip_range)

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−A_b ρ_b)`` over the masked tokens (advantages averaged per row), and metrics."""
        mask, dtype = inputs.mask, inputs.dtype
        delta = inputs.delta
        seq_adv = masked_mean(inputs.advantages, mask, dim=-1)
        sign = torch.sign(seq_adv).unsqueeze(-1)
        delta_clipped = delta.clamp(-self.clip_range_low, self.clip_range_high)
        pessimistic = sign * torch.minimum(sign * delta, sign * delta_clipped)
        log_geo = masked_mean(pessimistic, mask, dim=-1).clamp(-GEO_LOG_RATIO_CLAMP, GEO_LOG_RATIO_CLAMP)
        geo_ratio = torch.exp(log_geo)
        seq_loss = -seq_adv * geo_ratio
        loss = self.aggregate(seq_loss.unsqueeze(-1).expand_as(delta), mask)
        with torch.no_grad():
            cut_high = (delta > self.clip_range_high) & (sign > 0)
            cut_low = (delta < -self.clip_range_low) & (sign < 0)
            metrics = {
                "pg_loss": loss.detach(),
                "pg_clipfrac": masked_mean(cut_high.to(dtype), mask),
                "pg_clipfrac_lower": masked_mean(cut_low.to(dtype), mask),
                "ppo_kl": masked_mean(-delta, mask),
                "geo_ratio_mean": masked_mean(geo_ratio, mask.any(dim=-1)),
            }
        return loss, metrics
