"""``ppo`` policy loss: :class:`PPOPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

from typing import Any, ClassVar, Final

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, LossAggMode, PolicyLossFn
from trinity_core.ops import LOG_RATIO_CLAMP, as_bool_mask, compute_dtype
from trinity_core.ops.fast import as_float
from trinity_core.ops.fused import rows_with_gradient
from trinity_plugin_ppo._kernel import PPO_KERNEL, SEQUENCE_KL_EPS, ppo_token_terms

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

    Computation: the per-token terms and their derivative are computed in one pass with no autograd
    graph (``_kernel``); backward is one multiply. ``fused=True`` compiles that pass with
    ``torch.compile`` into a single loop (first call per shape compiles; without a C++ compiler it runs
    eagerly with a warning); it agrees with the default path to float rounding.

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
        mask = as_bool_mask(action_mask)
        if self.fallback_to_policy_gradient:
            old_logprob = logprob.detach()
        elif old_logprob is None:
            raise ValueError(
                f"policy loss {type(self).name()!r}: old_log_probs is None; the PPO ratio needs the "
                "sampling policy's log-probs (or set fallback_to_policy_gradient=True for plain PG)"
            )
        kernel = PPO_KERNEL if self.fused else ppo_token_terms
        with torch.no_grad():
            row_loss, row_count, local_grad, stats = kernel(
                logprob.detach(),
                old_logprob.detach(),
                advantages.detach(),
                # Compiled kernels read a float mask faster than a bool one.
                as_float(mask, compute_dtype(logprob)) if self.fused else mask,
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
