"""Configuration checks shared by presets that train on stored experiences (SFT, CPT, DPO).

trinity-core's run configuration says what a run does in ``mode`` (``both``: rollouts and training;
``train``: training only) and names the stored experiences in ``data.experiences`` (a disk buffer
directory or a ``save_to_disk`` dataset). These presets have no rollouts to learn from, so they need
``mode: train`` and ``data.experiences``.

The reference (trinity-rft) also forces checkpoint synchronisation between its explorer and trainer;
:func:`enforce_checkpoint_sync` does that for configuration objects that have a ``synchronizer``
section. trinity-core's has none (a run in mode ``train`` has no rollout model to synchronise), so there
it does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "EXPERIENCES_PATH",
    "MODE_PATH",
    "PIPELINE_MODES",
    "SAVE_INTERVAL_PATH",
    "SYNC_INTERVAL_PATH",
    "SYNC_METHOD_PATH",
    "TRAIN_MODE",
    "enforce_checkpoint_sync",
    "is_missing",
    "lookup",
    "require_offline_training",
    "run_mode",
]

logger = logging.getLogger(__name__)

MODE_PATH: Final[str] = "mode"
"""Where the run mode lives: ``"both"`` (rollouts and training) or ``"train"`` (training only)."""
TRAIN_MODE: Final[str] = "train"
"""The training-only mode, the one these presets need."""
EXPERIENCES_PATH: Final[str] = "data.experiences"
"""Where the stored experiences are named (a disk buffer directory or a ``save_to_disk`` dataset)."""
SYNC_METHOD_PATH: Final[str] = "synchronizer.sync_method"
SYNC_INTERVAL_PATH: Final[str] = "synchronizer.sync_interval"
SAVE_INTERVAL_PATH: Final[str] = "trainer.save_interval"
PIPELINE_MODES: Final[frozenset[str]] = frozenset({"both", "explore"})
"""Modes in which rollouts run and the experience pipeline (with its advantage function) is used
(``explore`` is the reference's rollout-only mode)."""

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
    """Require ``mode: train`` and stored experiences in ``data.experiences``.

    Raises:
        ValueError: the mode is not ``train`` (or the configuration has no mode), or
            ``data.experiences`` is unset; the message names the config path and the fix.
    """
    mode = run_mode(config)
    if mode != TRAIN_MODE:
        shown = "no mode" if mode is None else f"mode {mode!r}"
        raise ValueError(
            f"algorithm {algorithm!r} trains on stored experiences and has no rollouts to learn from, so it "
            f"does not support {shown}; set `{MODE_PATH}: {TRAIN_MODE}` and name the experiences in "
            f"`{EXPERIENCES_PATH}` (a disk buffer directory or a save_to_disk dataset)"
        )
    path = lookup(config, EXPERIENCES_PATH)
    if is_missing(path) or not path:
        where = "is not set" if not is_missing(path) else "does not exist in this configuration model"
        raise ValueError(
            f"algorithm {algorithm!r} in mode {TRAIN_MODE!r} reads its experiences from "
            f"`{EXPERIENCES_PATH}`, which {where}; set it to a disk buffer directory (written with "
            f"make_buffer('disk', path)) or a dataset saved with to_hf_datasets(...).save_to_disk(path)"
        )


def enforce_checkpoint_sync(config: Any, algorithm: str) -> None:
    """Use checkpoint synchronisation, every ``trainer.save_interval`` steps (reference adjustment).

    With no explorer there is no running rollout model to push weights to; the reference sets
    ``synchronizer.sync_method = "checkpoint"`` (warning when it changes it) and
    ``synchronizer.sync_interval = trainer.save_interval``. Fields the model lacks are left alone (all
    of them in trinity-core's configuration).
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
