"""``reinforceplusplus`` algorithm preset: :class:`ReinforcePlusPlusAlgorithm` (seed 002)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["ReinforcePlusPlusAlgorithm"]


class ReinforcePlusPlusAlgorithm(AlgorithmType):
    """REINFORCE++: whitened discounted returns computed in the trainer, with a PPO-clip loss.

    Hu et al., arXiv:2501.03262. Flags as seed 002: no critic, a reference model (``k2`` KL loss),
    advantages in the trainer (``reinforceplusplus`` is a trainer-side function), batch balancing
    allowed, schema ``experience``. Components: ``reinforceplusplus`` (this distribution), ``ppo``
    (trinity-plugin-ppo), KL penalty ``none`` and KL loss ``k2`` (trinity-plugin-kl), entropy
    ``default`` (trinity-plugin-entropy); ``repeat_times`` 2.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2501.03262"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = True
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``reinforceplusplus``, loss ``ppo``, KL penalty ``none``, KL loss
        ``k2``, entropy ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "reinforceplusplus",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
