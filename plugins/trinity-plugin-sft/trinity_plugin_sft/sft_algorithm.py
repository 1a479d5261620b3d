"""``sft`` algorithm preset: :class:`SFTAlgorithm`, and the configuration rules of offline presets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset
from trinity_plugin_sft.config_checks import enforce_checkpoint_sync, require_offline_training

__all__ = ["SFTAlgorithm", "checkpoint_sync", "offline_training"]


def offline_training(preset: Any, config: Any) -> None:
    """Train only (``mode: train``), on the stored experiences named in ``data.experiences``.

    See :func:`trinity_plugin_sft.config_checks.require_offline_training`.
    """
    require_offline_training(config, preset.name())


def checkpoint_sync(preset: Any, config: Any) -> None:
    """Synchronise by checkpoint where the configuration has a synchronizer.

    See :func:`trinity_plugin_sft.config_checks.enforce_checkpoint_sync`.
    """
    enforce_checkpoint_sync(config, preset.name())


class SFTAlgorithm(AlgorithmPreset):
    """SFT: supervised fine-tuning on a prepared data set (negative log-likelihood, no RL).

    ``L = -mean(log p(target token))`` over the response tokens. Flags: no critic, **no reference
    model**, no advantages, batch balancing allowed, schema ``sft`` (prompt + target tokens). Defaults:
    the ``sft`` loss; no KL penalty, no KL loss, no entropy term, no advantage function. Its rules: it
    trains only (``mode: train``) on the stored experiences named in ``data.experiences``, and
    synchronises by checkpoint.
    """

    use_reference = False
    schema = "sft"
    defaults: ClassVar[Mapping[str, Any]] = {
        "policy_loss_fn": "sft",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }
    config_rules = (offline_training, checkpoint_sync)
    conformance_config: ClassVar[dict[str, Any]] = {"mode": "train", "data": {"experiences": "experiences"}}
    """What every run of this preset needs besides the algorithm (a stored data set to train on): the
    conformance kit's ``preset_validates`` adds it to the minimal config."""
