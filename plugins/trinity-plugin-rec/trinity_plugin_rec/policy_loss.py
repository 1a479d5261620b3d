"""``rec`` policy loss: :class:`RECPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggMode, PolicyLossFn
from trinity_core.ops import masked_mean

__all__ = ["LOG_RATIO_CLAMP", "RECPolicyLossArgs", "RECPolicyLossFn"]

LOG_RATIO_CLAMP = 20.0
"""``logp − old`` (and the exponent of the ``advantage`` weight) is clamped to ``±LOG_RATIO_CLAMP``."""

ClipMode = Literal["none", "one-side", "gspo-one-side", "two-side", "ring"]
Weight = Literal["none", "importance_sampling", "gspo_importance_sampling", "advantage"]
Regularizer = Literal["none", "k2", "forward-kl"]


class RECPolicyLossArgs(ComponentArgs):
    """Arguments of :class:`RECPolicyLossFn`; defaults are trinity-rft 0.6.0's."""

    epsilon_low: float = Field(0.2, gt=0, le=1, description="Lower clip width: ratios below 1 - eps are out.")
    epsilon_high: float = Field(0.2, gt=0, description="Upper clip width: ratios above 1 + eps are out.")
    epsilon_low_prime: float = Field(
        0.4, gt=0, le=1, description="ring mode: A >= 0 tokens with ratio <= 1 - eps' are back in range."
    )
    epsilon_high_prime: float = Field(
        0.4, gt=0, description="ring mode: A <= 0 tokens with ratio >= 1 + eps' are back in range."
    )
    clip_mode: ClipMode = Field(
        "none", description="Which tokens train: none, one-side, gspo-one-side, two-side or ring."
    )
    weight: Weight = Field(
        "none",
        description=(
            "Advantage weighting: none, importance_sampling (A*r), gspo_importance_sampling (A*s, s the "
            "sequence ratio) or advantage (A*exp(A/temp))."
        ),
    )
    regularizer: Regularizer = Field(
        "none",
        description="none, k2 (+coef*(logp - old)^2, w.r.t. the rollout policy) or forward-kl (-coef*logp).",
    )
    regularizer_coef: float = Field(0.0, ge=0, description="Coefficient of the regularizer.")
    temp: float = Field(1.0, gt=0, description="Temperature of the 'advantage' weight exp(A/temp).")
    loss_agg_mode: LossAggMode | None = Field(
        None,
        description=(
            "None: token-mean, or seq-mean-token-mean with gspo-one-side (the reference's fixed choice, "
            "not overridden by the algorithm's mode); a mode name forces that mode."
        ),
    )


class RECPolicyLossFn(PolicyLossFn):
    """REC: L = -agg(w(A) * logp * in_range) + regularizer, a REINFORCE loss with token filtering.

    Per token (``r = sg(exp(clamp(logp − old, ±20)))``, ``ŝ_b = sg(exp(masked_mean_t(logp − old)))`` the
    sequence ratio of row ``b``):

    * in-range mask by ``clip_mode``:
      ``two-side``: ``1−ε_l ≤ r ≤ 1+ε_h``;
      ``one-side``: ``(A ≥ 0 ∧ r ≤ 1+ε_h) ∨ (A ≤ 0 ∧ r ≥ 1−ε_l)``;
      ``gspo-one-side``: the same on ``ŝ_b``;
      ``ring``: ``[1−ε_l ≤ r ≤ 1+ε_h] ∨ (A ≥ 0 ∧ r ≤ 1−ε_l') ∨ (A ≤ 0 ∧ r ≥ 1+ε_h')``;
      ``none``: every token;
    * weighted advantage by ``weight``: ``A``, ``A·r``, ``A·ŝ_b`` or ``A·exp(min(A/temp, 20))``;
    * ``L_t = −w(A)·logp·in``; ``k2``: ``+ c·(logp − old)²``; ``forward-kl``: ``− c·logp``;
    * ``loss = agg(L)``: ``token-mean`` (``seq-mean-token-mean`` with ``gspo-one-side``) unless
      ``loss_agg_mode`` names a mode; the trainer's global normalizers (``loss_scale=``) apply.

    The ``k2`` regulariser is taken **w.r.t. the rollout (old) policy**, not the reference model: it is
    Kimi k1.5's ``τ/2·(log π/π_old)²`` trust-region term with the ``1/2`` absorbed in ``c``; a KL to the
    reference model is the separate ``kl_loss_fn``. ``forward-kl`` is ``−c·logp`` on the sampled tokens,
    the sample estimate of ``c·KL(π_old ‖ π)`` up to a constant.

    Differences from the reference (docs/reference-differences.md, ``clamped-ratios``, ``rec-weights``):
    the log-ratio is clamped to ±20 before ``exp`` (and the ``advantage`` weight's exponent at 20), so
    stale data cannot overflow;
    ``gspo_importance_sampling`` works with every clip mode (the reference raises ``NameError`` unless
    ``clip_mode="gspo-one-side"``); NaN/inf at masked positions reach neither loss, metrics nor gradient.
    Metrics: ``pg_loss``, ``pg_clipfrac`` (fraction of selected tokens out of range).
    """

    Args: ClassVar[type[ComponentArgs]] = RECPolicyLossArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2509.24203"

    epsilon_low: float
    epsilon_high: float
    epsilon_low_prime: float
    epsilon_high_prime: float
    clip_mode: ClipMode
    weight: Weight
    regularizer: Regularizer
    regularizer_coef: float
    temp: float
    loss_agg_mode: LossAggMode | None

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """REC loss of ``(B, T)`` log-probs; returns ``(loss, {"pg_loss", "pg_clipfrac"})``."""
        mask = action_mask if action_mask.dtype == torch.bool else action_mask != 0
        dtype = torch.promote_types(logprob.dtype, torch.float32)
        # Select the inputs first: NaN/inf at masked positions must reach neither values nor gradients.
        lp = torch.where(mask, logprob.to(dtype), 0.0)
        old = torch.where(mask, old_logprob.to(dtype), 0.0).detach()
        adv = torch.where(mask, advantages.to(dtype), 0.0)
        log_ratio = (lp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = log_ratio.detach().exp()
        seq_ratio = None
        if self.clip_mode == "gspo-one-side" or self.weight == "gspo_importance_sampling":
            seq_ratio = masked_mean(log_ratio.detach(), mask, dim=-1).exp().unsqueeze(-1)

        in_range = self._in_range(ratio, seq_ratio, adv)
        weighted = self._weighted(adv, ratio, seq_ratio)
        losses = torch.where(in_range, -weighted * lp, 0.0)
        if self.regularizer == "k2":
            losses = losses + self.regularizer_coef * (lp - old).square()
        elif self.regularizer == "forward-kl":
            losses = losses - self.regularizer_coef * lp

        mode = self.loss_agg_mode or (
            "seq-mean-token-mean" if self.clip_mode == "gspo-one-side" else "token-mean"
        )
        loss = self.aggregate(losses, mask, mode)
        clipfrac = masked_mean((~in_range).to(dtype), mask)
        return loss, {"pg_loss": loss.detach(), "pg_clipfrac": clipfrac}

    def _in_range(self, ratio: Tensor, seq_ratio: Tensor | None, adv: Tensor) -> Tensor:
        lo, hi = 1.0 - self.epsilon_low, 1.0 + self.epsilon_high
        if self.clip_mode == "two-side":
            return (ratio >= lo) & (ratio <= hi)
        if self.clip_mode == "one-side":
            return ((adv >= 0) & (ratio <= hi)) | ((adv <= 0) & (ratio >= lo))
        if self.clip_mode == "gspo-one-side":
            assert seq_ratio is not None
            return ((adv >= 0) & (seq_ratio <= hi)) | ((adv <= 0) & (seq_ratio >= lo))
        if self.clip_mode == "ring":
            inner = (ratio >= lo) & (ratio <= hi)
            low_tail = (adv >= 0) & (ratio <= 1.0 - self.epsilon_low_prime)
            high_tail = (adv <= 0) & (ratio >= 1.0 + self.epsilon_high_prime)
            return inner | low_tail | high_tail
        return torch.ones_like(ratio, dtype=torch.bool)

    def _weighted(self, adv: Tensor, ratio: Tensor, seq_ratio: Tensor | None) -> Tensor:
        if self.weight == "importance_sampling":
            return adv * ratio
        if self.weight == "gspo_importance_sampling":
            assert seq_ratio is not None
            return adv * seq_ratio
        if self.weight == "advantage":
            return adv * (adv / self.temp).clamp(max=LOG_RATIO_CLAMP).exp()
        return adv
