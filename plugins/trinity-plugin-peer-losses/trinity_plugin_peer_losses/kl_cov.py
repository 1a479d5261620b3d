"""``kl_cov`` policy loss: :class:`KLCovPolicyLossFn` (verl ``loss_mode=kl_cov``)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import PolicyInputs, clamp_log_ratio, masked_mean
from trinity_plugin_peer_losses._covariance import selection_count, token_covariance, top_k_mask

__all__ = ["KLCovArgs", "KLCovPolicyLossFn"]


class KLCovArgs(LossAggArgs):
    """Arguments of :class:`KLCovPolicyLossFn` (defaults: verl's and the paper's)."""

    kl_cov_ratio: float = Field(
        0.0002,
        gt=0,
        le=1,
        description=(
            "Fraction of this call's selected tokens that get the KL penalty: the k = max(⌊ratio · n⌋, 1) "
            "tokens with the largest covariance."
        ),
    )
    ppo_kl_coef: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="Coefficient β of the |log π − log π_old| penalty."
    )


class KLCovPolicyLossFn(StandardPolicyLossFn):
    """KL-Cov: unclipped policy-gradient loss with a KL penalty on the top-covariance tokens.

    Cui et al., *The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models*
    (arXiv:2505.22617): instead of clipping, KL-Cov restrains the few tokens with the largest covariance
    between advantage and log-prob by a KL penalty towards the sampling policy. Per selected token, with
    ``δ = log π − log π_old`` and ``r = exp(clamp(δ, ±20))``:

        ``c_t = (A_t − Ā)(log π_t − mean log π)`` (means over this call's selected tokens),
        ``S`` = the ``k = max(⌊kl_cov_ratio · n⌋, 1)`` selected tokens with the largest ``c_t``,
        ``ℓ_t = −A_t r_t + β |δ_t| · [t ∈ S]``,   ``L = agg(ℓ)``   (``β`` = ``ppo_kl_coef``),

    as verl's ``kl_cov`` (no ratio clipping at all; ``|δ|`` stands for the KL). ``|δ|`` uses the unclamped
    log-ratio: it is linear, so nothing overflows, and its gradient stays ``±β`` however far a token moved.
    Ties in ``c_t`` are broken by position in the flattened ``(B, T)`` batch, earliest first (verl's
    ``torch.topk`` leaves them unspecified); ``k`` stays a device tensor, so there is no host sync (verl
    moves the tokens to the CPU).

    **Micro-batch invariance: not by construction** (``microbatch_invariant = False``). Selection is per
    call (per micro-batch): ``Ā``, ``mean log π`` and ``n`` are this call's, so ``S`` can change with the
    split; over a step about ``kl_cov_ratio`` of all tokens are penalised whatever the split. The trainer's
    global normalizers (``loss_scale=``) are used for aggregation, so what *is* invariant: (1) the
    aggregation given the selection; (2) the whole loss when ``ppo_kl_coef = 0`` (it is then
    ``agg(−A r)``); (3) splits whose micro-batches share the batch's statistics (e.g. identical
    micro-batches) with ``kl_cov_ratio · n`` integral. The tests check each.

    Numerics: inputs are set to 0 at masked positions first (NaN/inf there reach neither loss, metrics
    nor gradient); covariance and selection run in float64 without gradient. Metrics (detached 0-d):
    ``kl_cov_loss``, ``ppo_kl`` (masked mean of ``−δ``), ``ppo_kl_abs`` (masked mean of ``|δ|``, verl's
    ``ppo_kl``), ``kl_cov_frac`` (fraction of tokens penalised).
    """

    Args: ClassVar[type[ComponentArgs]] = KLCovArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2505.22617"
    microbatch_invariant: ClassVar[bool] = False
    """Selection is per micro-batch (top-k over the call's tokens): see the class docstring."""

    kl_cov_ratio: float
    ppo_kl_coef: float
    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``KLCovPolicyLossFn(backend="verl", kl_cov_ratio=0.0002, ppo_kl_coef=1.0,
        loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    def penalised_tokens(self, logprob: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
        """Bool ``(B, T)``: the tokens ``S`` that get the KL penalty (see the class docstring)."""
        cov = token_covariance(advantages, logprob, mask)
        return top_k_mask(cov, mask, selection_count(mask, self.kl_cov_ratio))

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−A r + β |δ| · [t ∈ S])`` over the ``action_mask`` tokens, and metrics."""
        mask, dtype, lp, adv = inputs.mask, inputs.dtype, inputs.logprob, inputs.advantages
        delta = inputs.delta
        ratio = torch.exp(clamp_log_ratio(delta))
        with torch.no_grad():
            penalised = self.penalised_tokens(lp, adv, mask)
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        penalty = torch.where(penalised, self.ppo_kl_coef * delta.abs(), zero)
        loss = self.aggregate(-adv * ratio + penalty, mask)
        with torch.no_grad():
            metrics = {
                "kl_cov_loss": loss.detach(),
                "ppo_kl": masked_mean(-delta, mask),
                "ppo_kl_abs": masked_mean(delta.abs(), mask),
                "kl_cov_frac": masked_mean(penalised.to(dtype), mask),
            }
        return loss, metrics
