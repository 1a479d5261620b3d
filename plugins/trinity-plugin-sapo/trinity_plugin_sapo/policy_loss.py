"""``sapo`` policy loss: :class:`SAPOPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field, model_validator
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, PolicyLossFn
from trinity_core.ops import LOG_RATIO_CLAMP, masked_mean, policy_inputs
from trinity_core.ops.fast import as_float
from trinity_core.ops.fused import loss_with_local_gradient
from trinity_plugin_sapo._kernel import METRIC_NAMES, SAPO_KERNEL

__all__ = ["LOG_RATIO_CLAMP", "SAPOArgs", "SAPOPolicyLossFn"]

_ROW_ONES: dict[tuple[int, torch.dtype, torch.device], Tensor] = {}


def _row_ones(like: Tensor, dtype: torch.dtype) -> Tensor:
    """A cached ``(B, 1)`` tensor of ones for the fused kernel's ``row_ones`` operand."""
    key = (like.shape[0] if like.dim() > 1 else 1, dtype, like.device)
    ones = _ROW_ONES.get(key)
    if ones is None:
        ones = _ROW_ONES[key] = torch.ones(key[0], 1, dtype=dtype, device=like.device)
    return ones


class SAPOArgs(LossAggArgs):
    """Arguments of :class:`SAPOPolicyLossFn` (defaults: trinity-rft 0.6.0's and the paper's)."""

    tau_pos: float = Field(1.0, gt=0, description="Gate temperature τ for tokens with advantage > 0.")
    tau_neg: float = Field(
        1.05,
        gt=0,
        description="Gate temperature τ for tokens with advantage <= 0; must be >= tau_pos (paper, seed).",
    )

    fused: bool = Field(
        False,
        description=(
            "Compile the per-token loss and its gradient into one kernel with torch.compile (first call "
            "per shape compiles for seconds; needs a C++ compiler on CPU, else runs eagerly with a warning)."
        ),
    )

    @model_validator(mode="after")
    def _tau_order(self) -> SAPOArgs:
        if self.tau_neg < self.tau_pos:
            raise ValueError(
                f"tau_neg ({self.tau_neg}) must be >= tau_pos ({self.tau_pos}): SAPO damps updates from "
                "negative advantages at least as fast as from positive ones; raise tau_neg or lower tau_pos"
            )
        return self


class SAPOPolicyLossFn(PolicyLossFn):
    """SAPO: soft-gated policy loss L = -agg(A · f(r)), f(r) = σ(τ(r − 1)) · 4/τ, r = π/π_old.

    Soft Adaptive Policy Optimization (Gao et al., arXiv:2511.20347) replaces PPO's hard clip by a smooth
    gate. The paper maximises ``J = E[f(r) · A]`` per token with

        ``f(r) = σ(τ (r − 1)) · 4/τ``, ``τ = tau_pos`` if ``A > 0`` else ``tau_neg``,

    so the gradient with respect to the token's log-prob is

        ``∂(f(r)·A)/∂log π = f'(r) · r · A = w(r) · A``,  ``w(r) = 4 σ(τ(r−1)) (1 − σ(τ(r−1))) · r``.

    ``w`` is bell-shaped: ``w(1) = 1`` (on-policy tokens get exactly the policy gradient ``A ∇log π``),
    ``w → 0`` as ``r → 0`` or ``r → ∞`` (far-off-policy tokens are attenuated smoothly instead of being cut
    off), and a larger ``τ`` narrows the bell. This class differentiates ``f(r)`` itself, so the
    gradient weight is exactly ``w(r)`` (see :meth:`gradient_weight`); the reported loss value is the
    negated aggregated objective ``−agg(A · f(r))``.

    Computation: the default path is the formula above in plain torch (:meth:`soft_gate_function`,
    ``self.aggregate``), differentiated by autograd. ``fused=True`` computes the per-token terms, their
    derivative ``w`` and the metric sums in one pass compiled by ``torch.compile`` (``_kernel``; first call
    per shape compiles; without a C++ compiler it runs eagerly with a warning); the loss is ``Σ_b c_b·S_b``
    over the row sums with the aggregation weights of ``loss_agg_mode``, and backward is one multiply. It
    equals the default path in value and gradient up to float rounding (property tests in
    ``tests/test_sapo_fused.py``).

    **Difference from the reference** (trinity-rft 0.6.0): it uses ``−A · sg(f(r)) · log π``,
    whose gradient weight is ``f(r) = 4σ(τ(r−1))/τ`` itself: monotone increasing in ``r`` (large ratios
    are never attenuated) and ``2/τ`` at ``r = 1`` (about twice the policy gradient on policy). Its loss
    value therefore differs too; the metrics ``avg_soft_gate``, ``avg_ratio``, ``ppo_kl`` and
    ``pos_adv_frac`` are the same quantities. verl's ``sapo`` implements the paper's gradient, as here.

    Numerics: ``log r = logprob − old_logprob`` is set to 0 at masked positions and clamped to
    ``±LOG_RATIO_CLAMP`` before ``exp``; advantages are set to 0 at masked positions, so NaN or inf
    stored there reaches neither the loss nor any gradient. Aggregation goes through ``loss_agg_mode``
    with the trainer's global normalizers (``loss_scale=``), so micro-batching does not change the
    gradient. Metrics are detached 0-d tensors of this call (no host synchronisation): ``sapo_loss``,
    ``ppo_kl`` (masked mean of ``−log r``), ``avg_soft_gate`` (of ``f``), ``avg_ratio``,
    ``avg_grad_weight`` (of ``w``) and ``pos_adv_frac``.
    """

    Args: ClassVar[type[ComponentArgs]] = SAPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2511.20347"

    tau_pos: float
    tau_neg: float
    loss_agg_mode: str
    fused: bool

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``SAPOPolicyLossFn(backend="verl", tau_pos=1.0, tau_neg=1.05, loss_agg_mode="token-mean",
        fused=False)``."""
        super().__init__(backend=backend, **args)

    def temperature(self, advantages: Tensor, like: Tensor) -> Tensor:
        """Per-token ``τ``: ``tau_pos`` where ``advantages > 0``, else ``tau_neg`` (``like``'s dtype)."""
        pos = torch.tensor(self.tau_pos, dtype=like.dtype, device=like.device)
        neg = torch.tensor(self.tau_neg, dtype=like.dtype, device=like.device)
        return torch.where(advantages > 0, pos, neg)

    def soft_gate_function(self, ratio: Tensor, advantages: Tensor) -> Tensor:
        """The soft gate ``f(r) = σ(τ (r − 1)) · 4/τ`` per token (trinity-rft API)."""
        tau = self.temperature(advantages, ratio)
        return torch.sigmoid(tau * (ratio - 1)) * (4.0 / tau)

    def gradient_weight(self, ratio: Tensor, advantages: Tensor) -> Tensor:
        """``w(r) = f'(r)·r = 4 σ(τ(r−1)) (1 − σ(τ(r−1))) · r``: the factor of ``A ∇log π`` in ∇L."""
        tau = self.temperature(advantages, ratio)
        x = tau * (ratio - 1)
        # σ(x)·σ(−x) equals σ(1 − σ) without the cancellation of 1 − σ(x) for large x.
        return 4.0 * torch.sigmoid(x) * torch.sigmoid(-x) * ratio

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``−agg(A · f(r))`` over the ``action_mask`` tokens, and metrics.

        The standard inputs of a policy loss (:mod:`trinity_core.components.policy_loss`).
        """
        if self.fused:
            return self._fused(logprob, old_logprob, action_mask, advantages)
        inputs = policy_inputs(logprob, old_logprob, action_mask, advantages)
        ratio = inputs.ratio
        # Policy loss: the negated soft-gated objective, differentiated by autograd through the gate.
        gate = self.soft_gate_function(ratio, inputs.advantages)
        loss = self.aggregate(-inputs.advantages * gate, inputs.mask)
        with torch.no_grad():
            mask, dtype = inputs.mask, inputs.dtype
            metrics = {
                "sapo_loss": loss.detach(),
                "ppo_kl": masked_mean(-inputs.log_ratio, mask),
                "avg_soft_gate": masked_mean(gate, mask),
                "avg_ratio": masked_mean(ratio, mask),
                "avg_grad_weight": masked_mean(self.gradient_weight(ratio, inputs.advantages), mask),
                "pos_adv_frac": masked_mean((inputs.advantages > 0).to(dtype), mask),
            }
        return loss, metrics

    def _fused(
        self, logprob: Tensor, old_logprob: Tensor, action_mask: Tensor, advantages: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``fused=True``: loss, local gradient and metrics in one compiled pass (:data:`SAPO_KERNEL`),
        backward one multiply in one autograd node; equal to the plain path up to float rounding."""
        dtype = torch.promote_types(logprob.dtype, torch.float32)
        # Detached inputs: no graph is recorded, and the same guards whether or not they required grad.
        q, row_coef, values = SAPO_KERNEL(
            logprob.detach(),
            old_logprob.detach(),
            advantages.detach(),
            # Compiled kernels read a float mask faster than a bool one.
            as_float(action_mask, dtype) if action_mask.dtype == torch.bool else action_mask.detach(),
            _row_ones(logprob, dtype),
            self.tau_pos,
            self.tau_neg,
            LOG_RATIO_CLAMP,
            *self.aggregation(),
        )
        loss = loss_with_local_gradient(logprob, values[0], q, row_coef)
        # One stacked tensor: the metrics are its 0-d views (detached, no host sync).
        metrics = dict(zip(METRIC_NAMES, values.unbind(), strict=True))
        return loss, metrics
