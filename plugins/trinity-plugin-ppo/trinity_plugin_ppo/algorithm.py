"""``ppo`` algorithm preset: :class:`PPOAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["PPOAlgorithm"]


class PPOAlgorithm(AlgorithmType):
    """PPO: critic-based GAE advantages in the trainer with the clipped-surrogate loss.

    Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347) as in the reference: a critic
    provides values for ``ppo`` (GAE) advantages, computed in the trainer
    (``compute_advantage_in_trainer = True``); the policy loss is ``ppo``; a reference model provides the
    ``k2`` KL loss; no KL penalty on rewards; the default entropy term; one rollout per task.

    Needs the distributions trinity-plugin-kl (``none``, ``k2``) and trinity-plugin-entropy
    (``default``), which this distribution declares as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/1707.06347"
    use_critic = True
    use_reference = True
    compute_advantage_in_trainer = True
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 1, advantage ``ppo``, loss ``ppo``, KL penalty ``none``, KL loss ``k2``,
        entropy ``default``."""
        return {
            "repeat_times": 1,
            "advantage_fn": "ppo",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
