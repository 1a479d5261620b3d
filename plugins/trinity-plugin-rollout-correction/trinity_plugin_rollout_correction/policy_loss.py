"""``rollout_correction``: any policy loss, its advantages weighted by the rollout-correction weights.

The inner loss ``ℓ_t(A_t)`` of every policy-gradient loss here is positively homogeneous in the
advantage (``ℓ_t(w A_t) = w ℓ_t(A_t)`` for ``w ≥ 0``: PPO's ``max(−A r, −A clip(r))``, REINFORCE,
GSPO, CISPO, SAPO), so passing ``w_t · A_t`` to the inner loss gives ``agg(w_t · ℓ_t)``, verl's
``pg_losses * rollout_is_weights``, through any loss, fused or not.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from trinity_core import registry
from trinity_core.components import ComponentArgs, PolicyLossFn
from trinity_plugin_rollout_correction.rejection import parse_rejection, rejection_keep
from trinity_plugin_rollout_correction.weights import CorrectionLevel, CorrectionMode, rollout_is_weights

__all__ = ["RolloutCorrectionArgs", "RolloutCorrectionLossFn"]

_PROVIDED = ("old_logprob", "rollout_logprob", "action_mask", "advantages")


class RolloutCorrectionArgs(ComponentArgs):
    """Arguments of :class:`RolloutCorrectionLossFn`."""

    policy_loss_fn: str = Field("ppo", description="The policy loss to correct (a registered name).")
    policy_loss_args: dict[str, Any] = Field(
        default_factory=dict, description="Arguments of that policy loss."
    )
    level: CorrectionLevel | None = Field(
        "token", description="token: ρ per token; sequence: per response; None: no IS weights (RS only)."
    )
    mode: CorrectionMode = Field(
        "truncate",
        description="truncate: w = min(ρ, upper) (TIS); mask: w = ρ inside [lower, upper], else 0.",
    )
    upper: float = Field(2.0, gt=0, description="The upper threshold of ρ.")
    lower: float | None = Field(
        None, ge=0, description="The lower threshold of ρ in mode mask; None: 1 / upper."
    )
    rollout_rs: str | None = Field(
        None,
        description=(
            "Rejection sampling, verl's options comma-separated: token_k1..k3, seq_sum_k1..k3, "
            "seq_mean_k1..k3, seq_max_k2, seq_max_k3; a rejected token gets weight 0. None: off."
        ),
    )
    rollout_rs_threshold: str | float | None = Field(
        None,
        description=(
            'One per option (comma-separated) or one for all: k1 "lower_upper" ratio bounds or an upper '
            "ratio bound (lower 1/upper); k2, k3 an upper bound on the divergence."
        ),
    )
    rollout_is_batch_normalize: bool = Field(
        False, description="Not supported (refused): see the plugin README's Limits."
    )


class RolloutCorrectionLossFn(PolicyLossFn):
    """``policy_loss_fn`` with its advantages multiplied by the rollout-correction weights ``w``
    (:func:`~trinity_plugin_rollout_correction.weights.rollout_is_weights` of the learner's
    ``old_logprob`` and the explorer's ``rollout_logprob``). Metrics: the inner loss's, and
    ``rollout_is_mean``, ``rollout_is_clipped_frac``, ``rollout_is_log_ratio_mean``."""

    Args = RolloutCorrectionArgs
    policy_loss_fn: str
    policy_loss_args: dict[str, Any]
    level: CorrectionLevel | None
    mode: CorrectionMode
    upper: float
    lower: float | None
    rollout_rs: str | None
    rollout_rs_threshold: str | float | None
    rollout_is_batch_normalize: bool

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """Build the inner policy loss; it may read only the columns this loss passes on."""
        super().__init__(backend, **args)
        if self.policy_loss_fn == "rollout_correction":
            raise ValueError("policy loss 'rollout_correction': policy_loss_fn cannot be rollout_correction")
        if self.rollout_is_batch_normalize:
            raise ValueError(
                "policy loss 'rollout_correction': rollout_is_batch_normalize is not supported: the batch "
                "mean of the weights needs old_logprob of the whole step before the first micro-batch's "
                "loss, and with one update per step old_logprob is each micro-batch's own forward pass; a "
                "per-micro-batch mean would change with the micro-batch size and the rank count. Leave it "
                "false (see the plugin README, Limits)"
            )
        self.criteria = parse_rejection(self.rollout_rs, self.rollout_rs_threshold) if self.rollout_rs else []
        inner_cls = registry.resolve("policy_loss", self.policy_loss_fn)
        self.inner: PolicyLossFn = inner_cls(backend=backend, **self.policy_loss_args)
        wanted = {self.inner.mapper.to_trinity(k) for k in self.inner.select_keys}
        unknown = sorted(wanted - set(_PROVIDED))
        if unknown:
            raise ValueError(
                f"policy loss 'rollout_correction': the inner loss {self.policy_loss_fn!r} reads {unknown}, "
                f"which it does not pass on (it passes {list(_PROVIDED)}); pick another policy_loss_fn"
            )

    @classmethod
    def conformance_inputs(cls, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Behaviour log-probs for the conformance kit: the old ones, a little off (a stale policy)."""
        old = inputs["old_logprob"]
        return {"rollout_logprob": old - 0.1 * torch.sin(torch.arange(old.numel()).reshape(old.shape))}

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        rollout_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The inner loss on ``w · advantages``; ``w`` from ``old_logprob`` and ``rollout_logprob``."""
        lower = 1.0 / self.upper if self.lower is None else self.lower
        weights, metrics = rollout_is_weights(
            old_logprob,
            rollout_logprob,
            action_mask,
            level=self.level,
            mode=self.mode,
            upper=self.upper,
            lower=lower,
        )
        if self.criteria:
            keep, rs_metrics = rejection_keep(old_logprob, rollout_logprob, action_mask, self.criteria)
            weights = torch.where(keep, weights, 0.0)
            metrics.update(rs_metrics)
        columns = {
            "old_logprob": old_logprob,
            "rollout_logprob": rollout_logprob,
            "action_mask": action_mask,
            "advantages": advantages * weights.to(advantages.dtype),
        }
        inner_kwargs = {k: columns[self.inner.mapper.to_trinity(k)] for k in self.inner.select_keys}
        # This call's normalisers and mode (set by the base class from the trainer's keywords) go on.
        loss, inner_metrics = self.inner(
            logprob, **inner_kwargs, loss_scale=self._loss_scale, loss_agg_mode=self._call_mode
        )
        return loss, {**inner_metrics, **metrics}
