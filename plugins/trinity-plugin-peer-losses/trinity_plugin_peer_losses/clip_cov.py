"""``clip_cov`` policy loss: :class:`ClipCovPolicyLossFn` (verl ``loss_mode=clip_cov``)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field, model_validator
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import PolicyInputs, masked_mean
from trinity_plugin_peer_losses._covariance import selection_count, token_covariance, top_k_mask

__all__ = ["ClipCovArgs", "ClipCovPolicyLossFn"]


class ClipCovArgs(LossAggArgs):
    """Arguments of :class:`ClipCovPolicyLossFn` (defaults: verl's and the paper's)."""

    clip_range: float = Field(
        0.2,
        gt=0,
        allow_inf_nan=False,
        description="PPO clip ε: the ratio is clipped to [1 − ε_low, 1 + ε_high].",
    )
    clip_range_low: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="ε_low (lower bound 1 − ε_low); None: clip_range."
    )
    clip_range_high: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="ε_high (upper bound 1 + ε_high); None: clip_range."
    )
    clip_cov_ratio: float = Field(
        0.0002,
        gt=0,
        le=1,
        description=(
            "Fraction of this call's selected tokens whose gradient is cut: k = max(⌊ratio · n⌋, 1) of the "
            "candidates with the largest covariance."
        ),
    )
    clip_cov_lb: float = Field(
        1.0, allow_inf_nan=False, description="Candidates have covariance strictly above this lower bound."
    )
    clip_cov_ub: float = Field(
        5.0, allow_inf_nan=False, description="Candidates have covariance strictly below this upper bound."
    )

    @model_validator(mode="after")
    def _window_not_empty(self) -> ClipCovArgs:
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(
                f"clip_cov_lb ({self.clip_cov_lb}) must be < clip_cov_ub ({self.clip_cov_ub}): "
                "candidates lie strictly between them; lower clip_cov_lb or raise clip_cov_ub"
            )
        return self


class ClipCovPolicyLossFn(StandardPolicyLossFn):
    """Clip-Cov: PPO-clip loss that also cuts the gradient of the top-covariance tokens.

    Cui et al., *The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models*
    (arXiv:2505.22617): entropy collapses because of tokens with a large covariance between advantage
    and log-prob; Clip-Cov removes a small fraction of them from the gradient. Per selected token, with
    ``r = exp(clamp(log π − log π_old, ±20))``:

        ``ℓ_t = max(−A_t r_t, −A_t clip(r_t, 1 − ε_low, 1 + ε_high))`` (PPO; ``ε`` = ``clip_range*``),
        ``c_t = (A_t − Ā)(log π_t − mean log π)`` (means over this call's selected tokens),
        candidates: not clipped by PPO and ``clip_cov_lb < c_t < clip_cov_ub``,
        ``S`` = the ``k = max(⌊clip_cov_ratio · n⌋, 1)`` candidates with the largest ``c_t``,
        ``L = agg(ℓ · [t ∉ S])``.

    Tokens in ``S`` get loss 0 and gradient 0 but keep counting in the normalizer (as in verl), so cutting
    them never rescales the other tokens' gradients.

    **Selection (differs from the paper and verl).** Both draw the ``k`` tokens uniformly at random among
    the candidates (``torch.randperm``, after a host sync for the count). Here the ``k`` candidates with the
    largest covariance are cut, ties broken by position in the flattened ``(B, T)`` batch (earliest
    first): deterministic, reproducible, and free of host syncs (``k`` stays a device tensor).

    **Micro-batch invariance: not by construction** (``microbatch_invariant = False``). Selection is per
    call (per micro-batch): the means ``Ā``, ``mean log π`` and the count ``n`` are this call's, so the set
    ``S`` (hence the loss) can change with how a step is split. The fraction refers to the same tokens the
    selection ranges over, so over a step about ``clip_cov_ratio`` of all tokens are cut whatever the
    split (each call cuts at least one candidate when it has one). The trainer's global normalizers
    (``loss_scale=``) are used for aggregation as in every loss, so what *is* invariant: (1) the
    aggregation given the selection; (2) the whole loss whenever no token is a candidate (it is then PPO);
    (3) splits whose micro-batches share the batch's statistics (e.g. identical micro-batches) with
    ``clip_cov_ratio · n`` integral. The tests check each.

    Numerics: inputs are set to 0 at masked positions first (NaN/inf there reach neither loss, metrics
    nor gradient); covariance and selection run in float64 without gradient. Metrics (detached 0-d):
    ``clip_cov_loss``, ``ppo_kl`` (masked mean of ``−δ``), ``pg_clipfrac`` (PPO-clipped fraction),
    ``cov_clipfrac`` (fraction cut by covariance; verl's ``pg_clipfrac``).
    """

    Args: ClassVar[type[ComponentArgs]] = ClipCovArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2505.22617"
    microbatch_invariant: ClassVar[bool] = False
    """Selection is per micro-batch (top-k over the call's tokens): see the class docstring."""

    clip_range: float
    clip_range_low: float | None
    clip_range_high: float | None
    clip_cov_ratio: float
    clip_cov_lb: float
    clip_cov_ub: float
    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``ClipCovPolicyLossFn(backend="verl", clip_range=0.2, clip_range_low=None, clip_range_high=None,
        clip_cov_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0, loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    def cut_tokens(self, logprob: Tensor, advantages: Tensor, mask: Tensor, ppo_clipped: Tensor) -> Tensor:
        """Bool ``(B, T)``: the tokens ``S`` whose gradient is cut (see the class docstring)."""
        cov = token_covariance(advantages, logprob, mask)
        candidates = mask & ~ppo_clipped & (cov > self.clip_cov_lb) & (cov < self.clip_cov_ub)
        return top_k_mask(cov, candidates, selection_count(mask, self.clip_cov_ratio))

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(ℓ · [t ∉ S])`` over the ``action_mask`` tokens, and metrics."""
        mask, dtype = inputs.mask, inputs.dtype
        low = self.clip_range if self.clip_range_low is None else self.clip_range_low
        high = self.clip_range if self.clip_range_high is None else self.clip_range_high
        log_ratio = inputs.log_ratio
        ratio = torch.exp(log_ratio)
        adv = inputs.advantages
        unclipped = -adv * ratio
        clipped = -adv * ratio.clamp(1 - low, 1 + high)
        with torch.no_grad():
            ppo_clipped = (clipped > unclipped) & mask
            cut = self.cut_tokens(inputs.logprob, adv, mask, ppo_clipped)
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        per_token = torch.where(cut, zero, torch.maximum(unclipped, clipped))
        loss = self.aggregate(per_token, mask)
        with torch.no_grad():
            metrics = {
                "clip_cov_loss": loss.detach(),
                "ppo_kl": masked_mean(-log_ratio, mask),
                "pg_clipfrac": masked_mean(ppo_clipped.to(dtype), mask),
                "cov_clipfrac": masked_mean(cut.to(dtype), mask),
            }
        return loss, metrics
