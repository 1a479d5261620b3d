"""``gigpo`` algorithm preset: :class:`GiGPOAlgorithm` (reference ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["GiGPOAlgorithm"]


class GiGPOAlgorithm(AlgorithmType):
    """GiGPO: group-in-group advantages (``gigpo``) for multi-turn agents with the PPO clipped loss.

    Critic-free (Feng et al., arXiv:2505.10978): episode-level relative advantages plus step-level ones
    over anchor states, computed in the experience pipeline; a reference model for the ``k2`` KL loss;
    ``repeat_times`` 8 trajectories per task. The component arguments are the reference's:
    ``gigpo`` with ``omega=1, gamma=1, fnorm="none", epsilon=1e-6`` and ``ppo`` with symmetric clipping
    ``0.2/0.2`` and ``token-mean``. Needs trinity-plugin-ppo, trinity-plugin-kl and
    trinity-plugin-entropy, declared as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2505.10978"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The reference preset: ``gigpo`` + ``ppo`` with their arguments, ``k2`` KL loss, 8 repeats."""
        return {
            "repeat_times": 8,
            "advantage_fn": "gigpo",
            "advantage_fn_args": {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
            "policy_loss_fn": "ppo",
            "policy_loss_fn_args": {
                "clip_range_low": 0.2,
                "clip_range_high": 0.2,
                "loss_agg_mode": "token-mean",
            },
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
