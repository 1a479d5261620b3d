"""The plugin API version: what a plugin declares it was built for, checked when it loads.

A plugin's top-level package may set ``TRINITY_API_VERSION = "1"`` (``trinity plugins new`` writes it). A
plugin built for another major version loads as a failure naming both versions, instead of failing later
in a contract it does not know.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["API_ATTRIBUTE", "PLUGIN_API_VERSION", "api_problem"]

PLUGIN_API_VERSION = "1"
"""The component contracts this trinity-core provides; the major part changes on a breaking change."""

API_ATTRIBUTE = "TRINITY_API_VERSION"
"""Attribute of a plugin's top-level package naming the API version it was built for."""


def api_problem(obj: Any) -> str | None:
    """Why ``obj``'s plugin does not fit this core's API (``None``: it fits, or declares nothing)."""
    top = str(getattr(obj, "__module__", "") or "").split(".")[0]
    declared = getattr(sys.modules.get(top), API_ATTRIBUTE, None)
    if declared is None or str(declared).split(".")[0] == PLUGIN_API_VERSION.split(".")[0]:
        return None
    return (
        f"{top} was built for trinity-core plugin API {declared} ({top}.{API_ATTRIBUTE}), but this "
        f"trinity-core provides API {PLUGIN_API_VERSION}: install a release of the plugin built for API "
        f"{PLUGIN_API_VERSION}, or a trinity-core that provides API {declared}"
    )
