"""``dpo`` algorithm preset: :class:`DPOAlgorithm` (seed ``trinity.algorithm.algorithm.DPOAlgorithm``)."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Final

from trinity_plugin_sft.config_checks import (
    enforce_checkpoint_sync,
    is_missing,
    lookup,
    require_offline_training,
)

from trinity_core.components import AlgorithmType

__all__ = ["DPO_KL_LOSS", "DPO_REPEAT_TIMES", "DPOAlgorithm"]

logger = logging.getLogger(__name__)

DPO_REPEAT_TIMES: Final[int] = 2
"""Rows per preference sample: one chosen and one rejected response."""
DPO_KL_LOSS: Final[str] = "k2"
"""KL loss the preset uses, and the one it substitutes when the user names none."""


class DPOAlgorithm(AlgorithmType):
    """DPO: direct preference optimisation on (chosen, rejected) pairs against a frozen reference model.

    Flags as the seed: a reference model, no critic, no advantages, and no batch balancing
    (``can_balance_batch = False``: balancing reorders rows, and adjacent pairs must stay adjacent). The
    ``dpo`` loss, a ``k2`` KL loss, the default entropy term, ``repeat_times = 2``.

    :meth:`check_config`, following the reference: the run must train only (``mode: train``) on stored
    pairs named in ``data.experiences`` (see :mod:`trinity_plugin_sft.config_checks`); ``repeat_times``
    other than 2 is an **error** (the reference silently overwrites it); no KL loss (``none`` or unset)
    is **replaced by** ``k2`` with a warning, as in the reference.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2305.18290"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = False
    schema = "dpo"
    conformance_config: ClassVar[dict[str, Any]] = {"mode": "train", "data": {"experiences": "experiences"}}
    """What every run of this preset needs besides the algorithm (a stored data set to train on): the
    conformance kit's ``preset_validates`` adds it to the minimal config."""

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, loss ``dpo``, KL penalty ``none``, KL loss ``k2``, entropy ``default``."""
        return {
            "repeat_times": DPO_REPEAT_TIMES,
            "policy_loss_fn": "dpo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": DPO_KL_LOSS,
            "entropy_loss_fn": "default",
        }

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Offline training only, ``repeat_times == 2``, and a KL loss (``k2`` substituted for none).

        Raises:
            ValueError: a mode other than ``train``, no ``data.experiences``, or ``repeat_times != 2``.
        """
        require_offline_training(config, "dpo")
        repeat_times = lookup(config, "algorithm.repeat_times")
        if not is_missing(repeat_times) and repeat_times is not None and repeat_times != DPO_REPEAT_TIMES:
            raise ValueError(
                f"algorithm 'dpo' needs repeat_times = {DPO_REPEAT_TIMES} (one chosen and one rejected row "
                f"per sample), got {repeat_times}; remove algorithm.repeat_times or set it to 2"
            )
        kl_loss = lookup(config, "algorithm.kl_loss_fn")
        if not is_missing(kl_loss) and kl_loss in (None, "none"):
            logger.warning("algorithm 'dpo' needs a KL loss; setting algorithm.kl_loss_fn to %r", DPO_KL_LOSS)
            algorithm = lookup(config, "algorithm")
            if isinstance(algorithm, dict):
                algorithm["kl_loss_fn"] = DPO_KL_LOSS
            else:
                algorithm.kl_loss_fn = DPO_KL_LOSS
        enforce_checkpoint_sync(config, "dpo")
