"""``opmd`` algorithm preset: :class:`OPMDAlgorithm` (seed 002)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["OPMDAlgorithm"]


class OPMDAlgorithm(AlgorithmType):
    """OPMD: group-baseline advantages from the experience pipeline with the OPMD policy loss.

    Flags as seed 002: no critic, a reference model (``k2`` KL loss), advantages in the experience
    pipeline (``opmd`` groups experiences, hence ``compute_advantage_in_trainer = False``), batch
    balancing allowed, schema ``experience``. Components: advantage and loss ``opmd`` (this
    distribution), KL penalty ``none`` and KL loss ``k2`` (trinity-plugin-kl), entropy ``default``
    (trinity-plugin-entropy); ``repeat_times`` 2.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2501.12599"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage and loss ``opmd``, KL penalty ``none``, KL loss ``k2``, entropy
        ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "opmd",
            "policy_loss_fn": "opmd",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
