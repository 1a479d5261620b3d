"""Importing plugins through stevedore, each in isolation, over the entry points the registry chose.

stevedore's managers import whatever their namespace lists; the registry has already left out
distributions blocked by ``TRINITY_DISABLE_PLUGINS`` and refused names claimed twice, so these managers
list exactly the entry points they are given (``list_entry_points`` is stevedore's point to override).
A plugin that fails to import reaches ``on_load_failure_callback`` and is returned as an exception,
never raised: one broken plugin must not hide the others.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Sequence
from typing import Any

from stevedore import DriverManager, ExtensionManager
from stevedore.exception import NoMatches

from trinity_core.registry.records import EntryPointInfo

__all__ = ["Loaded", "load_all", "load_one"]

Loaded = tuple[Any, BaseException | None]
"""``(object, None)`` for a loaded entry point, ``(None, exception)`` for one that failed to import."""


class _Extensions(ExtensionManager[Any]):
    """stevedore's ``ExtensionManager`` over the given entry points of one namespace."""

    def __init__(
        self, namespace: str, entry_points: Sequence[md.EntryPoint], failures: dict[str, BaseException]
    ) -> None:
        self._given = list(entry_points)

        def failed(_manager: Any, ep: md.EntryPoint, exc: BaseException) -> None:
            failures[ep.value] = exc

        super().__init__(namespace, on_load_failure_callback=failed)

    def list_entry_points(self) -> list[md.EntryPoint]:
        """The entry points given to the constructor."""
        return self._given


class _Driver(DriverManager[Any]):
    """stevedore's ``DriverManager`` for one given entry point."""

    def __init__(self, entry_point: md.EntryPoint, failures: dict[str, BaseException]) -> None:
        self._given = [entry_point]

        def failed(_manager: Any, ep: md.EntryPoint, exc: BaseException) -> None:
            failures[ep.value] = exc

        super().__init__(
            entry_point.group,
            entry_point.name,
            on_load_failure_callback=failed,
            on_missing_entrypoints_callback=None,
        )

    def list_entry_points(self) -> list[md.EntryPoint]:
        """The one entry point given to the constructor."""
        return self._given


def _entry_point(info: EntryPointInfo) -> md.EntryPoint:
    return md.EntryPoint(info.name, info.value, info.group)


def _missing(value: str) -> ImportError:
    return ImportError(f"entry point {value} did not load")


def load_one(info: EntryPointInfo) -> Loaded:
    """The object ``info`` points to, loaded by a ``DriverManager``, or the error its import raised."""
    failures: dict[str, BaseException] = {}
    try:
        return _Driver(_entry_point(info), failures).driver, None
    except NoMatches:
        return None, failures.get(info.value, _missing(info.value))


def load_all(namespace: str, infos: Sequence[EntryPointInfo]) -> dict[tuple[str, str], Loaded]:
    """``(name, value)`` -> :data:`Loaded` for every entry point of ``infos``.

    One ``ExtensionManager`` imports them all, each in isolation.
    """
    unique = {(i.name, i.value): _entry_point(i) for i in infos}
    failures: dict[str, BaseException] = {}
    manager = _Extensions(namespace, list(unique.values()), failures)
    out: dict[tuple[str, str], Loaded] = {
        (e.name, e.entry_point.value): (e.plugin, None) for e in manager.extensions
    }
    for key in unique:
        out.setdefault(key, (None, failures.get(key[1], _missing(key[1]))))
    return out
