"""``sft`` algorithm preset: :class:`SFTAlgorithm` (seed ``trinity.algorithm.algorithm.SFTAlgorithm``)."""

from __future__ import annotations

from typing import Any

from trinity_core.components import AlgorithmType
from trinity_plugin_sft.config_checks import enforce_checkpoint_sync, require_offline_training

__all__ = ["SFTAlgorithm"]


class SFTAlgorithm(AlgorithmType):
    """SFT: supervised fine-tuning on a prepared data set (negative log-likelihood, no RL).

    No critic, no reference model, no advantages; the ``sft`` loss; no KL and no entropy term. It trains
    only (mode ``train``) from the data set named in ``buffer.trainer_input.experience_buffer.path`` and
    synchronises by checkpoint; see :func:`trinity_plugin_sft.config_checks.require_offline_training`
    for what :meth:`check_config` enforces while the core configuration lacks those fields.
    """

    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "sft"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """Loss ``sft``; KL penalty and KL loss ``none``; entropy ``none``; no advantage function."""
        return {
            "policy_loss_fn": "sft",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Mode must be ``train`` with an input data set; synchronisation is by checkpoint.

        Raises:
            ValueError: mode ``both``/``explore``, or mode ``train`` without the data set path.
        """
        require_offline_training(config, cls.name())
        enforce_checkpoint_sync(config, cls.name())
