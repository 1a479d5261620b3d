"""``ppo`` policy loss: :class:`PPOPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

from typing import Any, ClassVar, Final

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, LossAggMode, PolicyLossFn
from trinity_core.ops import LOG_RATIO_CLAMP, as_bool_mask, compute_dtype, masked_mean, policy_inputs
from trinity_core.ops.fast import as_float
from trinity_core.ops.fused import rows_with_gradient
from trinity_plugin_ppo._kernel import PPO_KERNEL, SEQUENCE_KL_EPS

__all__ = ["DEFAULT_CLIP_RANGE", "SEQUENCE_KL_EPS", "PPOArgs", "PPOPolicyLossFn"]

DEFAULT_CLIP_RANGE: Final[float] = 0.2
"""The clip ε used when neither ``clip_range`` nor the one-sided bound is given (the reference's
``default_args()`` value)."""


class PPOArgs(LossAggArgs):
    """Arguments of :class:`PPOPolicyLossFn` (names and defaults: trinity-rft 0.6.0's ``ppo``)."""

    clip_range: float | None = Field(
        None,
        ge=0,
        description=(
            "Symmetric clip ε: the ratio is clipped to [1 − ε_low, 1 + ε_high]. None means 0.2 "
            "(DEFAULT_CLIP_RANGE); clip_range_low / clip_range_high override one side each."
        ),
    )
    clip_range_low: float | None = Field(
        None, ge=0, description="ε_low, the lower clip bound is 1 − ε_low; None: clip_range."
    )
    clip_range_high: float | None = Field(
        None,
        ge=0,
        description="ε_high, the upper clip bound is 1 + ε_high (DAPO clip-higher); None: clip_range.",
    )
    clip_ratio_c: float = Field(
        3.0,
        gt=1.0,
        description="Dual-clip constant c > 1: for A < 0 the per-token loss is at most −A·c (Ye et al. 2020)",
    )
    loss_agg_mode: LossAggMode | None = Field(  # type: ignore[assignment]  # widened to allow None (as trinity-rft)
        "token-mean",
        description=(
            "How per-token losses are reduced (token-mean, seq-mean-token-sum, seq-mean-token-mean, "
            "seq-mean-token-sum-norm); None: the mode the trainer passes (the algorithm's)."
        ),
    )
    enable_sequence_masking: bool = Field(
        False,
        description=(
            "DeepSeek-V3.2 off-policy sequence masking: drop the loss of negative-advantage tokens in "
            "sequences whose mean KL(old‖current) exceeds delta_sequence_masking."
        ),
    )
    delta_sequence_masking: float = Field(
        0.1, allow_inf_nan=False, description="The per-sequence KL threshold δ of sequence masking."
    )
    fallback_to_policy_gradient: bool = Field(
        False,
        description=(
            "Ignore old log-probs and use the plain policy gradient −A·∇log π (ratio ≡ 1, so no clipping); "
            "old_log_probs may then be None."
        ),
    )
    fused: bool = Field(
        False,
        description=(
            "Compile the per-token loss and its gradient into one kernel with torch.compile (first call "
            "per shape compiles for seconds; needs a C++ compiler on CPU, else runs eagerly with a warning)."
        ),
    )


class PPOPolicyLossFn(PolicyLossFn):
    """PPO clipped surrogate, asymmetric and dual clip: L = agg(ℓ), r = exp(clamp(log π − log π_old, ±20)).

    Per selected token, with advantage ``A``, ``lo = clip_range_low``, ``hi = clip_range_high`` and
    ``c = clip_ratio_c`` (Schulman et al. 2017; dual clip: Ye et al. 2020)::

        ℓ1 = −A·r,   ℓ2 = −A·clip(r, 1 − lo, 1 + hi),   C1 = max(ℓ1, ℓ2)
        ℓ  = min(C1, −A·c)   if A < 0        (dual clip: the loss of a negative advantage is bounded)
        ℓ  = C1              otherwise

    ``lo`` and ``hi`` default to ``clip_range``, which defaults to :data:`DEFAULT_CLIP_RANGE` (0.2), so a
    bare ``ppo`` works (the reference asserted instead when ``clip_range`` was not given).

    Sequence masking (``enable_sequence_masking``; DeepSeek-V3.2): per row ``b``,
    ``kl_b = Σ_t −δ_t m_t / (Σ_t m_t + 1e-10)`` with ``δ = log r``; the loss of every token with
    ``A < 0`` in a row with ``kl_b > delta_sequence_masking`` is set to 0 (it still counts in the
    normalizer, as in the reference).

    ``fallback_to_policy_gradient``: ``δ = log π − sg(log π)``, so ``r ≡ 1`` with ``∇r = ∇log π``:
    the plain policy gradient ``−A ∇log π`` (no clipping can trigger; ``ppo_kl`` is 0); ``old_logprob``
    is not read and may be None.

    Metrics (detached 0-d tensors of this call, no host synchronisation): ``pg_loss``; ``pg_clipfrac``
    = share of tokens with ``ℓ2 > ℓ1``; ``pg_clipfrac_lower`` = share with ``A < 0`` and ``C1 > −A·c``;
    ``ppo_kl`` = masked mean of ``−δ``; with sequence masking ``seq_mask/masked_tokens`` (masked share of
    the selected tokens) and ``seq_mask/mean_sequence_kl`` (mean ``kl_b`` over rows with a selected
    token).

    Computation: the default path is the formula above in plain torch (``torch.where``, ``maximum``,
    ``minimum``, ``clamp``), reduced with ``self.aggregate`` and differentiated by autograd.
    ``fused=True`` computes the per-token terms and their derivative in one pass compiled by
    ``torch.compile`` (``_kernel``; first call per shape compiles; without a C++ compiler it runs eagerly
    with a warning), backward is one multiply; it equals the default path in value and gradient up to
    float rounding (property tests in ``tests/test_ppo_fused.py``).

    Differences from the reference (trinity-rft 0.6.0): ``default_args()`` equals the constructor's
    defaults (``clip_range`` None resolving to 0.2, instead of a ``default_args`` of 0.2 and an
    ``__init__`` default that asserts); NaN/inf at masked positions never reach the loss or gradient;
    ``seq_mask/masked_tokens`` counts only selected tokens (the reference also counted padding with a
    negative stored advantage) and ``seq_mask/mean_sequence_kl`` skips empty rows; metrics are tensors,
    not Python floats; the aggregation honours the trainer's global normalizers (``loss_scale=``).
    """

    Args: ClassVar[type[ComponentArgs]] = PPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/1707.06347"

    clip_range: float | None
    clip_ratio_c: float
    loss_agg_mode: str | None
    enable_sequence_masking: bool
    delta_sequence_masking: float
    fallback_to_policy_gradient: bool
    fused: bool

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``PPOPolicyLossFn(backend="verl", clip_range=None, clip_range_low=None, clip_range_high=None,
        clip_ratio_c=3.0, loss_agg_mode="token-mean", enable_sequence_masking=False,
        delta_sequence_masking=0.1, fallback_to_policy_gradient=False, fused=False)``."""
        super().__init__(backend=backend, **args)

    @property
    def clip_range_low(self) -> float:
        """Resolved ``ε_low``: ``clip_range_low``, else ``clip_range``, else 0.2."""
        return _first_set(self.args.clip_range_low, self.args.clip_range)  # type: ignore[attr-defined]

    @property
    def clip_range_high(self) -> float:
        """Resolved ``ε_high``: ``clip_range_high``, else ``clip_range``, else 0.2."""
        return _first_set(self.args.clip_range_high, self.args.clip_range)  # type: ignore[attr-defined]

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor | None,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(ℓ)`` over the ``action_mask`` tokens, and metrics.

        Args:
            logprob: current log-probs ``(B, T)`` (differentiable).
            old_logprob: log-probs of the sampling policy ``(B, T)``; None only with
                ``fallback_to_policy_gradient``.
            action_mask: ``(B, T)``, True / non-zero on the tokens that count.
            advantages: ``(B, T)`` (or broadcastable) advantages.
        """
        if self.fallback_to_policy_gradient:
            old_logprob = logprob.detach()
        elif old_logprob is None:
            raise ValueError(
                f"policy loss {type(self).name()!r}: old_log_probs is None; the PPO ratio needs the "
                "sampling policy's log-probs (or set fallback_to_policy_gradient=True for plain PG)"
            )
        if self.fused:
            return self._fused(logprob, old_logprob, action_mask, advantages)
        inputs = policy_inputs(logprob, old_logprob, action_mask, advantages)
        mask, log_ratio, ratio = inputs.mask, inputs.log_ratio, inputs.ratio
        # Policy loss: the clipped surrogate, then the dual clip for negative advantages.
        neg_adv = -inputs.advantages
        loss1 = neg_adv * ratio
        loss2 = neg_adv * ratio.clamp(1.0 - self.clip_range_low, 1.0 + self.clip_range_high)
        clipped = torch.maximum(loss1, loss2)
        loss3 = neg_adv * self.clip_ratio_c
        negative = inputs.advantages < 0
        per_token = torch.where(negative, torch.minimum(clipped, loss3), clipped)
        if self.enable_sequence_masking:
            with torch.no_grad():
                row_count = mask.sum(dim=-1).to(inputs.dtype)
                row_kl = -log_ratio.sum(dim=-1) / (row_count + SEQUENCE_KL_EPS)
                drop = negative & (row_kl > self.delta_sequence_masking).unsqueeze(-1)
                nonempty = row_count > 0
            per_token = torch.where(drop, 0.0, per_token)
        loss = self.aggregate(per_token, mask)
        metrics: dict[str, Tensor] = {}
        with torch.no_grad():
            metrics["pg_clipfrac"] = masked_mean((loss2 > loss1).to(inputs.dtype), mask)
            metrics["pg_clipfrac_lower"] = masked_mean((negative & (clipped > loss3)).to(inputs.dtype), mask)
            metrics["ppo_kl"] = masked_mean(-log_ratio, mask)
            if self.enable_sequence_masking:
                metrics["seq_mask/masked_tokens"] = masked_mean(drop.to(inputs.dtype), mask)
                metrics["seq_mask/mean_sequence_kl"] = masked_mean(row_kl, nonempty)
            metrics["pg_loss"] = loss.detach()
        return loss, metrics

    def _fused(
        self, logprob: Tensor, old_logprob: Tensor, action_mask: Tensor, advantages: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``fused=True``: the per-token terms and their derivative in one compiled pass (:data:`PPO_KERNEL`),
        backward one multiply; equal to the plain path up to float rounding."""
        mask = as_bool_mask(action_mask)
        with torch.no_grad():
            row_loss, row_count, local_grad, stats = PPO_KERNEL(
                logprob.detach(),
                old_logprob.detach(),
                advantages.detach(),
                # Compiled kernels read a float mask faster than a bool one.
                as_float(mask, compute_dtype(logprob)),
                self.clip_range_low,
                self.clip_range_high,
                self.clip_ratio_c,
                LOG_RATIO_CLAMP,
                self.delta_sequence_masking if self.enable_sequence_masking else None,
            )
        loss = self.aggregate_rows(rows_with_gradient(logprob, row_loss, local_grad), row_count)
        with torch.no_grad():
            values = stats / row_count.sum().clamp_min(1)
            metrics = {
                "pg_clipfrac": values[0],
                "pg_clipfrac_lower": values[1],
                "ppo_kl": values[2],
            }
            if self.enable_sequence_masking:
                metrics["seq_mask/masked_tokens"] = values[3]
                metrics["seq_mask/mean_sequence_kl"] = stats[4] / stats[5].clamp_min(1)
            metrics["pg_loss"] = loss.detach()
        return loss, metrics


def _first_set(*values: float | None) -> float:
    for value in values:
        if value is not None:
            return value
    return DEFAULT_CLIP_RANGE
