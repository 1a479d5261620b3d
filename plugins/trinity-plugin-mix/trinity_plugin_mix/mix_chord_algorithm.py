"""``mix_chord`` algorithm preset: :class:`MIXCHORDAlgorithm` (seed ``MIXCHORDAlgorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["MIXCHORDAlgorithm"]


class MIXCHORDAlgorithm(AlgorithmType):
    """CHORD: MIX with a scheduled SFT weight μ and a φ-weighted SFT term (``mix_chord`` loss).

    As :class:`~trinity_plugin_mix.mix_algorithm.MIXAlgorithm` with the ``mix_chord`` loss: GRPO
    advantages in the pipeline, KL penalty ``none``, KL loss ``k2`` (explicit), entropy ``mix``,
    ``repeat_times`` 8. The trainer must feed ``expert_mask`` and ``step`` per row.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2508.11408"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 8, advantage ``grpo``, loss ``mix_chord``, KL penalty ``none``, KL loss ``k2``,
        entropy ``mix``."""
        return {
            "repeat_times": 8,
            "advantage_fn": "grpo",
            "policy_loss_fn": "mix_chord",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "mix",
        }
