"""Configuration checks shared by presets that train from a prepared data set (SFT, CPT, DPO).

The reference checks ``config.mode`` and ``buffer.trainer_input.experience_buffer.path``, and forces
checkpoint synchronisation. trinity-core's run configuration does not have these fields yet; the checks
read them where they exist (attribute or mapping access along the dotted path) and skip what the model
does not define, so the presets resolve today and become strict as soon as the fields are added.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "EXPERIENCE_BUFFER_PATH",
    "MODE_PATH",
    "PIPELINE_MODES",
    "SAVE_INTERVAL_PATH",
    "SYNC_INTERVAL_PATH",
    "SYNC_METHOD_PATH",
    "enforce_checkpoint_sync",
    "is_missing",
    "lookup",
    "require_offline_training",
    "run_mode",
]

logger = logging.getLogger(__name__)

MODE_PATH: Final[str] = "mode"
"""Where the run mode lives: ``"both"`` (explore and train), ``"explore"``, ``"train"``, ``"bench"``, ..."""
EXPERIENCE_BUFFER_PATH: Final[str] = "buffer.trainer_input.experience_buffer.path"
"""Where the trainer's input data set is named (a path or URI)."""
SYNC_METHOD_PATH: Final[str] = "synchronizer.sync_method"
SYNC_INTERVAL_PATH: Final[str] = "synchronizer.sync_interval"
SAVE_INTERVAL_PATH: Final[str] = "trainer.save_interval"
PIPELINE_MODES: Final[frozenset[str]] = frozenset({"both", "explore"})
"""Modes in which rollouts run and the experience pipeline (with its advantage function) is used."""

_MISSING = object()


def lookup(config: Any, path: str) -> Any:
    """The value at dotted ``path`` of ``config`` (attributes or mapping keys).

    Returns a private sentinel, tested with :func:`is_missing`, when the configuration model has no such
    field; ``None`` when the field exists but is unset (or a parent section is ``None``).
    """
    node = config
    for part in path.split("."):
        if node is None:
            return None
        if isinstance(node, Mapping):
            if part not in node:
                return _MISSING
            node = node[part]
        elif hasattr(node, part):
            node = getattr(node, part)
        else:
            return _MISSING
    return node


def is_missing(value: Any) -> bool:
    """True when :func:`lookup` found no such field in the configuration model."""
    return value is _MISSING


def run_mode(config: Any) -> str | None:
    """The run mode (``config.mode``; an enum's ``value``), or ``None`` when the model has no mode."""
    mode = lookup(config, MODE_PATH)
    if is_missing(mode) or mode is None:
        return None
    return str(getattr(mode, "value", mode))


def require_offline_training(config: Any, algorithm: str) -> None:
    """Reject modes that explore, and require the input data set when training (reference SFT/DPO rule).

    * ``mode`` ``"both"`` or ``"explore"``: ``ValueError`` (the algorithm learns from a fixed data set,
      it has no rollouts to explore with);
    * ``mode`` ``"train"``: ``buffer.trainer_input.experience_buffer.path`` must be set;
    * a configuration without ``mode`` is not checked.
    """
    mode = run_mode(config)
    if mode is None:
        return
    if mode in PIPELINE_MODES:
        raise ValueError(
            f"algorithm {algorithm!r} trains on a prepared data set and does not support mode {mode!r}; "
            f"set `{MODE_PATH}: train` and name the data set in `{EXPERIENCE_BUFFER_PATH}`"
        )
    if mode != "train":
        return
    path = lookup(config, EXPERIENCE_BUFFER_PATH)
    if is_missing(path) or not path:
        where = "is not set" if not is_missing(path) else "does not exist in this configuration model"
        raise ValueError(
            f"algorithm {algorithm!r} in mode 'train' reads its data from `{EXPERIENCE_BUFFER_PATH}`, which "
            f"{where}; set it to the path or URI of the {algorithm} data set"
        )


def enforce_checkpoint_sync(config: Any, algorithm: str) -> None:
    """Use checkpoint synchronisation, every ``trainer.save_interval`` steps (reference adjustment).

    With no explorer there is no running rollout model to push weights to; the reference sets
    ``synchronizer.sync_method = "checkpoint"`` (warning when it changes it) and
    ``synchronizer.sync_interval = trainer.save_interval``. Fields the model lacks are left alone.
    """
    method = lookup(config, SYNC_METHOD_PATH)
    synchronizer = lookup(config, "synchronizer")
    if is_missing(method) or synchronizer is None or is_missing(synchronizer):
        return
    if str(getattr(method, "value", method)) != "checkpoint":
        logger.warning(
            "algorithm %r only supports checkpoint synchronisation; setting %s to 'checkpoint' (was %r)",
            algorithm,
            SYNC_METHOD_PATH,
            method,
        )
        _assign(synchronizer, "sync_method", "checkpoint")
    interval = lookup(config, SAVE_INTERVAL_PATH)
    if (
        not is_missing(interval)
        and interval is not None
        and not is_missing(lookup(config, SYNC_INTERVAL_PATH))
    ):
        _assign(synchronizer, "sync_interval", interval)


def _assign(node: Any, key: str, value: Any) -> None:
    if isinstance(node, dict):
        node[key] = value
    else:
        setattr(node, key, value)
