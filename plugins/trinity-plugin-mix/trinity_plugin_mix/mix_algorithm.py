"""``mix`` algorithm preset: :class:`MIXAlgorithm` (seed ``trinity.algorithm.algorithm.MIXAlgorithm``)."""

from __future__ import annotations

from typing import Any

from trinity_core.components import AlgorithmType

__all__ = ["MIXAlgorithm"]


class MIXAlgorithm(AlgorithmType):
    """MIX: GRPO on rollouts plus SFT on expert data in one loss (``mix``), entropy on rollout rows only.

    GRPO advantages (``grpo``, in the experience pipeline), the ``mix`` loss, no KL penalty, a ``k2`` KL
    loss (named explicitly: trinity-core's base default is ``none``, the reference's was ``k2``), the
    ``mix`` entropy loss (trinity-plugin-entropy), ``repeat_times`` 8. The trainer must feed batches
    with ``expert_mask`` (the reference's ``mix`` sample strategy, not an algorithm key here). The
    reference's ``use_rollout`` flag is never read there and is not defined.
    """

    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 8, advantage ``grpo``, loss ``mix``, KL penalty ``none``, KL loss ``k2``,
        entropy ``mix``."""
        return {
            "repeat_times": 8,
            "advantage_fn": "grpo",
            "policy_loss_fn": "mix",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "mix",
        }
