"""Optional parts of trinity-core and the packages each one needs (the extras of ``pyproject.toml``).

``pip install trinity-core`` is what a plugin author needs: the components, ops, wire format, registry,
config validation and conformance kit. Training needs ``trinity-core[train]``; :func:`require_extra`
checks for it up front so that a missing package is one clear message instead of an import traceback
from deep inside the trainer.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtraError", "require_extra"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("transformers", "accelerate", "datasets", "tokenizers", "tqdm", "filelock"),
    "hf": ("datasets",),
    "lora": ("peft",),
}
"""Importable module names each extra provides (``filelock`` locks a run directory)."""


class MissingExtraError(ImportError):
    """A feature was used whose optional packages are not installed; the message names the install line."""


def require_extra(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``EXTRAS[extra]`` can be imported.

    Args:
        extra: a key of :data:`EXTRAS`, e.g. ``"train"``.
        feature: what needs it, for the message, e.g. ``"trinity train"``.
    """
    missing = [name for name in EXTRAS[extra] if not _importable(name)]
    if missing:
        raise MissingExtraError(
            f"{feature} needs the '{extra}' extra of trinity-core, which is not installed (missing: "
            f"{', '.join(missing)}); install it with: pip install 'trinity-core[{extra}]'",
            name=missing[0],
        )


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, or a None entry in sys.modules
        return False
