"""``sft`` algorithm preset: :class:`SFTAlgorithm` (seed ``trinity.algorithm.algorithm.SFTAlgorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType
from trinity_plugin_sft.config_checks import enforce_checkpoint_sync, require_offline_training

__all__ = ["SFTAlgorithm"]


class SFTAlgorithm(AlgorithmType):
    """SFT: supervised fine-tuning on a prepared data set (negative log-likelihood, no RL).

    No critic, no reference model, no advantages; the ``sft`` loss; no KL and no entropy term. It trains
    only (``mode: train``) on the stored experiences named in ``data.experiences`` (prompt + target
    tokens; the loss covers the response tokens); see
    :func:`trinity_plugin_sft.config_checks.require_offline_training`.
    """

    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "sft"
    conformance_config: ClassVar[dict[str, Any]] = {"mode": "train", "data": {"experiences": "experiences"}}
    """What every run of this preset needs besides the algorithm (a stored data set to train on): the
    conformance kit's ``preset_validates`` adds it to the minimal config."""

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
        """``mode`` must be ``train`` and ``data.experiences`` set; synchronisation is by checkpoint.

        Raises:
            ValueError: another mode (``both``), or mode ``train`` without ``data.experiences``.
        """
        require_offline_training(config, cls.name())
        enforce_checkpoint_sync(config, cls.name())
