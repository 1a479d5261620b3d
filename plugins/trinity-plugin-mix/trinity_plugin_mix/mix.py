"""``mix`` policy loss: :class:`MIXPolicyLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn``)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field
from torch import Tensor
from trinity_plugin_sft import SFTLossFn, SFTTokenLoss

from trinity_core.components import ComponentArgs
from trinity_plugin_mix.mixed import MixedArgs, MixedPolicyLoss

__all__ = ["MIXArgs", "MIXPolicyLossFn"]


class MIXArgs(MixedArgs):
    """Arguments of :class:`MIXPolicyLossFn`."""

    mu: float = Field(0.1, ge=0.0, le=1.0, description="Weight μ of the SFT term; the RL term gets 1 − μ.")


class MIXPolicyLossFn(MixedPolicyLoss):
    """MIX: PPO clip on rollout rows plus SFT on expert rows, L = (1 − μ) L_rl + μ L_sft.

    Expert rows (``expert_mask`` True, from the trainer's mixed sampling) get the plain ``sft`` loss;
    the others the PPO clip with dual clip. Normalisation, masking and metrics: see
    :class:`~trinity_plugin_mix.mixed.MixedPolicyLoss`. Differences from the reference: metrics are not
    multiplied by the sample weights, global normalisation per subset with
    :class:`~trinity_plugin_mix.loss_scale.MixLossScale`, no host synchronisation, and the metrics of an
    empty subset are 0 instead of missing.
    """

    Args: ClassVar[type[ComponentArgs]] = MIXArgs

    mu: float

    def make_sft_loss(self, loss_agg_mode: str) -> SFTTokenLoss:
        """``sft`` (negative log-likelihood)."""
        return SFTLossFn(backend=self.backend, loss_agg_mode=loss_agg_mode)

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        expert_mask: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Mixed loss and metrics.

        Args:
            logprob, old_logprob, action_mask, advantages: ``(B, T)`` as for PPO (``old_logprob`` and
                ``advantages`` are not read on expert rows).
            expert_mask: ``(B,)`` bool, True for expert (SFT) rows.
        """
        return self.combine(logprob, old_logprob, action_mask, advantages, expert_mask, self.mu)
