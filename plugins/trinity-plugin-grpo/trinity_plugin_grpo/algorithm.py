"""``grpo`` algorithm preset: :class:`GRPOAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType
from trinity_plugin_grpo.placement import check_advantage_placement

__all__ = ["GRPOAlgorithm"]


class GRPOAlgorithm(AlgorithmType):
    """GRPO: group-relative advantages in the experience pipeline, PPO-clip loss, k2 KL loss.

    Group-relative policy optimisation (Shao et al., *DeepSeekMath*, arXiv:2402.03300). Flags as seed
    002: no critic, a reference model (for the ``k2`` KL loss), advantages computed in the experience
    pipeline (``compute_advantage_in_trainer = False``: ``grpo`` needs whole task groups), batch
    balancing allowed, ``"experience"`` schema. Defaults (reference table 1.2): ``repeat_times`` 2,
    advantage ``grpo``, policy loss ``ppo``, KL penalty ``none``, KL loss ``k2``, entropy ``default``.

    :meth:`check_config` rejects an advantage function that runs in the trainer (e.g. ``grpo_verl``,
    reference defect 8.14; see :mod:`trinity_plugin_grpo.placement`). Needs trinity-plugin-ppo,
    trinity-plugin-kl and trinity-plugin-entropy, which this distribution declares as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2402.03300"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``grpo``, loss ``ppo``, KL penalty ``none``, KL loss ``k2``,
        entropy ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "grpo",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Reject an advantage function whose ``compute_in_trainer()`` is True (``ValueError``)."""
        check_advantage_placement(cls, config)
