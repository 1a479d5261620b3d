"""``dpo`` algorithm preset: :class:`DPOAlgorithm`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from trinity_plugin_sft.config_checks import is_missing, lookup
from trinity_plugin_sft.sft_algorithm import checkpoint_sync, offline_training

from trinity_core.components import AlgorithmPreset

__all__ = ["DPO_KL_LOSS", "DPO_REPEAT_TIMES", "DPOAlgorithm", "kl_loss_present", "pair_rows"]

logger = logging.getLogger(__name__)

DPO_REPEAT_TIMES: Final[int] = 2
"""Rows per preference sample: one chosen and one rejected response."""
DPO_KL_LOSS: Final[str] = "k2"
"""KL loss the preset uses, and the one it substitutes when the user names none."""


def pair_rows(preset: Any, config: Any) -> None:
    """Two rows per sample (``repeat_times`` 2), one chosen and one rejected row per sample (``ValueError``).

    trinity-rft 0.6.0 silently overwrites another value; here it is an error.
    """
    repeat_times = lookup(config, "algorithm.repeat_times")
    if not is_missing(repeat_times) and repeat_times is not None and repeat_times != DPO_REPEAT_TIMES:
        raise ValueError(
            f"algorithm 'dpo' needs repeat_times = {DPO_REPEAT_TIMES} (one chosen and one rejected row "
            f"per sample), got {repeat_times}; remove algorithm.repeat_times or set it to 2"
        )


def kl_loss_present(preset: Any, config: Any) -> None:
    """No KL loss (``none`` or unset) is replaced by ``k2`` with a warning, as trinity-rft does."""
    kl_loss = lookup(config, "algorithm.kl_loss_fn")
    if not is_missing(kl_loss) and kl_loss in (None, "none"):
        logger.warning("algorithm 'dpo' needs a KL loss; setting algorithm.kl_loss_fn to %r", DPO_KL_LOSS)
        algorithm = lookup(config, "algorithm")
        if isinstance(algorithm, dict):
            algorithm["kl_loss_fn"] = DPO_KL_LOSS
        else:
            algorithm.kl_loss_fn = DPO_KL_LOSS


class DPOAlgorithm(AlgorithmPreset):
    """DPO: direct preference optimisation on (chosen, rejected) pairs against a frozen reference model.

    ``L = -log sigmoid(beta * ((log pi - log ref)(chosen) - (log pi - log ref)(rejected)))``. Flags: a
    reference model, no critic, no advantages, schema ``dpo``, and **no batch balancing** (balancing
    reorders rows, and adjacent pairs must stay adjacent). Defaults: the ``dpo`` loss, no KL penalty, a
    ``k2`` KL loss, the default entropy term, 2 rows per sample.

    Rules, following trinity-rft 0.6.0: the run must train only (``mode: train``) on stored pairs named
    in ``data.experiences`` (see :mod:`trinity_plugin_sft.config_checks`); ``repeat_times`` other than 2
    is an **error** (trinity-rft silently overwrites it); no KL loss (``none`` or unset) is **replaced
    by** ``k2`` with a warning; synchronisation is by checkpoint.
    """

    paper = "https://arxiv.org/abs/2305.18290"
    can_balance_batch = False
    schema = "dpo"
    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": DPO_REPEAT_TIMES,
        "policy_loss_fn": "dpo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": DPO_KL_LOSS,
        "entropy_loss_fn": "default",
    }
    config_rules = (offline_training, pair_rows, kl_loss_present, checkpoint_sync)
    conformance_config: ClassVar[dict[str, Any]] = {"mode": "train", "data": {"experiences": "experiences"}}
    """What every run of this preset needs besides the algorithm (a stored data set to train on): the
    conformance kit's ``preset_validates`` adds it to the minimal config."""
