"""Entry-point scanning: which plugins are installed, by whom, without importing any of them.

We read ``importlib.metadata`` directly rather than stevedore's entry-point cache: that cache keeps only
``(name, value, group)`` per entry point, so it cannot say which distribution (and version) declared a
name, which conflict messages and ``TRINITY_DISABLE_PLUGINS`` need. Loading follows stevedore's model:
one namespace per kind, the named driver alone for a run, each extension in isolation for a listing.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
from collections.abc import Iterable

from trinity_core.registry.records import EntryPointInfo

__all__ = [
    "DISABLE_ENV",
    "STRICT_ENV",
    "disabled_distributions",
    "normalize_distribution",
    "scan_entry_points",
    "strict_mode",
]

STRICT_ENV = "TRINITY_STRICT_PLUGINS"
"""Set to ``1`` to make every plugin load failure and conflict an error (tox and CI set it)."""

DISABLE_ENV = "TRINITY_DISABLE_PLUGINS"
"""Comma-separated distribution names whose entry points are ignored (``trinity-plugin-sapo-fork``)."""


def normalize_distribution(name: str) -> str:
    """PEP 503 normal form: ``Trinity_Plugin.SAPO`` -> ``trinity-plugin-sapo``."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def strict_mode() -> bool:
    """Whether ``TRINITY_STRICT_PLUGINS`` asks for strict plugin loading."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def disabled_distributions() -> frozenset[str]:
    """Normalized distribution names listed in ``TRINITY_DISABLE_PLUGINS``."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(normalize_distribution(n) for n in re.split(r"[,\s]+", raw) if n.strip())


def scan_entry_points(groups: Iterable[str]) -> tuple[dict[str, list[EntryPointInfo]], list[EntryPointInfo]]:
    """Entry points of ``groups``, deduplicated, with blocked distributions set apart.

    The same distribution can be seen twice (an editable install plus a path entry): entries are
    deduplicated by ``(group, name, distribution, value)``. Order is deterministic: by name, then
    distribution. Returns ``(enabled entry points per group, disabled entry points)``.
    """
    wanted = set(groups)
    blocked = disabled_distributions()
    seen: set[tuple[str, str, str, str]] = set()
    found: dict[str, list[EntryPointInfo]] = {g: [] for g in wanted}
    disabled: list[EntryPointInfo] = []
    installed = md.entry_points()
    for ep in (ep for group in sorted(wanted) for ep in installed.select(group=group)):
        dist = ep.dist
        dist_name = normalize_distribution(dist.name) if dist is not None and dist.name else "<unknown>"
        version = dist.version if dist is not None and dist.version else ""
        key = (ep.group, ep.name, dist_name, ep.value)
        if key in seen:
            continue
        seen.add(key)
        info = EntryPointInfo(ep.group, ep.name, ep.value, dist_name, version)
        (disabled if dist_name in blocked else found[ep.group]).append(info)
    for infos in found.values():
        infos.sort(key=lambda i: (i.name, i.distribution, i.value))
    return found, disabled
