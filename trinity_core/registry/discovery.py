"""Entry-point discovery through stevedore: which plugins are installed, by whom, nothing imported.

stevedore lists each namespace (:meth:`stevedore.ExtensionManager.list_entry_points`); its list keeps
only ``(name, value, group)`` per entry point, so ``importlib.metadata`` names the distribution and
version that declare each one, which messages, conflicts between distributions and
``TRINITY_DISABLE_PLUGINS`` need. Loading is in :mod:`trinity_core.registry.loading`.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
from collections.abc import Iterable
from typing import Any

from stevedore import _cache as stevedore_cache
from stevedore.named import NamedExtensionManager

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

UNKNOWN_DISTRIBUTION = "<unknown>"
"""Distribution name of an entry point stevedore lists but no installed distribution declares."""


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


def _forget_stevedore_snapshots(groups: Iterable[str]) -> None:
    # stevedore keeps what it read for the life of the process, per namespace and per sys.path. A
    # registry scans once and caches itself; a new scan (a new registry, refresh() after installing a
    # plugin) must see what is installed now, so both snapshots go. The second is private to stevedore:
    # if it moves, refresh() within one process misses new plugins until the next process.
    for group in groups:
        NamedExtensionManager.ENTRY_POINT_CACHE.pop(group, None)
    internal = getattr(getattr(stevedore_cache, "_c", None), "_internal", None)
    if isinstance(internal, dict):
        internal.clear()


def _listed(group: str) -> list[md.EntryPoint]:
    # A named manager with no names reads the namespace and imports nothing.
    manager: NamedExtensionManager[Any] = NamedExtensionManager(
        group, names=[], on_missing_entrypoints_callback=None
    )
    return list(manager.list_entry_points())


def _providers(groups: set[str]) -> dict[tuple[str, str, str], list[tuple[str, str]]]:
    """``(group, name, value)`` -> ``(normalized distribution, version)`` of every declaring distribution."""
    out: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    installed = md.entry_points()
    for ep in (ep for group in sorted(groups) for ep in installed.select(group=group)):
        dist = ep.dist
        name = normalize_distribution(dist.name) if dist is not None and dist.name else UNKNOWN_DISTRIBUTION
        version = dist.version if dist is not None and dist.version else ""
        out.setdefault((ep.group, ep.name, ep.value), []).append((name, version))
    return out


def scan_entry_points(groups: Iterable[str]) -> tuple[dict[str, list[EntryPointInfo]], list[EntryPointInfo]]:
    """Entry points of ``groups`` as stevedore lists them, each named with its distribution.

    An entry point declared by two distributions becomes one record per distribution (so that the
    registry sees the conflict); the same distribution seen twice (an editable install plus a path
    entry) is one record. Order is deterministic: by name, then distribution. Returns
    ``(enabled entry points per group, entry points of distributions in TRINITY_DISABLE_PLUGINS)``.
    """
    wanted = set(groups)
    _forget_stevedore_snapshots(wanted)
    blocked = disabled_distributions()
    providers = _providers(wanted)
    seen: set[tuple[str, str, str, str]] = set()
    found: dict[str, list[EntryPointInfo]] = {g: [] for g in wanted}
    disabled: list[EntryPointInfo] = []
    for group in sorted(wanted):
        for ep in _listed(group):
            for dist_name, version in providers.get((group, ep.name, ep.value), [(UNKNOWN_DISTRIBUTION, "")]):
                key = (group, ep.name, dist_name, ep.value)
                if key in seen:
                    continue
                seen.add(key)
                info = EntryPointInfo(group, ep.name, ep.value, dist_name, version)
                (disabled if dist_name in blocked else found[group]).append(info)
    for infos in found.values():
        infos.sort(key=lambda i: (i.name, i.distribution, i.value))
    return found, disabled
