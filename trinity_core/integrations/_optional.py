"""Import an optional dependency with a message that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ``ImportError`` saying ``pip install 'trinity-core[<extra>]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"trinity_core.integrations.{extra} needs {module!r}, which is not installed: "
            f"pip install 'trinity-core[{extra}]' ({exc})"
        ) from exc
