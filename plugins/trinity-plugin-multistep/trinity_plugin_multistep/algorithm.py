"""``multi_step_grpo`` preset: :class:`MultiStepGRPOAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any

from trinity_core.components import AlgorithmType

__all__ = ["MultiStepGRPOAlgorithm"]


class MultiStepGRPOAlgorithm(AlgorithmType):
    """Multi-step GRPO: step-wise GRPO advantages (``step_wise_grpo``) with the PPO clipped loss.

    Flags as seed 002: no critic, a reference model (``k2`` KL loss), advantages in the experience
    pipeline (``step_wise_grpo`` needs whole tasks), batch balancing allowed, ``experience`` schema;
    ``repeat_times`` 8. Needs trinity-plugin-ppo (``ppo``), trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), declared as dependencies.
    """

    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 8, advantage ``step_wise_grpo``, loss ``ppo``, KL penalty ``none``, KL loss
        ``k2``, entropy ``default``."""
        return {
            "repeat_times": 8,
            "advantage_fn": "step_wise_grpo",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
