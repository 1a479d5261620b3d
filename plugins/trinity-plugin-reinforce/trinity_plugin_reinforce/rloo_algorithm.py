"""``rloo`` algorithm preset: :class:`RLOOAlgorithm` (seed 002)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["RLOOAlgorithm"]


class RLOOAlgorithm(AlgorithmType):
    """RLOO: leave-one-out baselines over the responses to each task, computed in the trainer, PPO-clip loss.

    Ahmadian et al., arXiv:2402.14740. Flags as seed 002: no critic, a reference model (``k2`` KL
    loss), advantages in the trainer (``rloo`` is a trainer-side function), batch balancing allowed,
    schema ``experience``. Components: ``rloo`` (this distribution), ``ppo`` (trinity-plugin-ppo), KL
    penalty ``none`` and KL loss ``k2`` (trinity-plugin-kl), entropy ``default``
    (trinity-plugin-entropy); ``repeat_times`` 2.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2402.14740"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = True
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``rloo``, loss ``ppo``, KL penalty ``none``, KL loss ``k2``,
        entropy ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "rloo",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
