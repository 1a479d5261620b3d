"""``asymre`` algorithm preset: :class:`AsymREAlgorithm` (seed 002)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["AsymREAlgorithm"]


class AsymREAlgorithm(AlgorithmType):
    """AsymRE: shifted group-mean baselines from the experience pipeline with the OPMD policy loss.

    Flags as seed 002: no critic, no reference model, advantages in the experience pipeline
    (``asymre`` groups experiences), batch balancing allowed, schema ``experience``. Components:
    advantage ``asymre`` and loss ``opmd`` (this distribution), KL penalty and KL loss ``none``
    (trinity-plugin-kl), entropy ``none`` (trinity-plugin-entropy); ``repeat_times`` 2.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2506.20520"
    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``asymre``, loss ``opmd``, no KL penalty, no KL loss, no entropy."""
        return {
            "repeat_times": 2,
            "advantage_fn": "asymre",
            "policy_loss_fn": "opmd",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }
