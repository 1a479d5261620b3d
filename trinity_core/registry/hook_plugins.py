"""The pluggy plugin manager of trinity-core: hook plugins found and imported through stevedore.

Hook plugins are modules declared in the ``trinity_core.hooks`` entry-point namespace; each is loaded
in isolation (a failing import is recorded, not fatal, unless ``TRINITY_STRICT_PLUGINS=1``) and
checked with ``check_pending()`` so that a misspelled hook name is an error naming the plugin.

This module belongs to the registry because the registry pulls ``trinity_register_components``
registrations from it; :mod:`trinity_core.hooks` re-exports it beside the helpers that call hooks, so
imports go one way: ``trinity_core.hooks`` -> ``trinity_core.registry``.
"""

from __future__ import annotations

import difflib
import itertools
import traceback
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import pluggy

from trinity_core import hookspecs
from trinity_core.registry.core import IN_PROCESS
from trinity_core.registry.discovery import DISABLE_ENV, scan_entry_points, strict_mode
from trinity_core.registry.errors import PluginError, PluginLoadError
from trinity_core.registry.kinds import HOOKS_NAMESPACE
from trinity_core.registry.loading import load_one
from trinity_core.registry.records import EntryPointInfo, PluginFailure, Registration

__all__ = [
    "HookCallError",
    "HookError",
    "PluginLoadWarning",
    "TrinityPluginManager",
    "get_plugin_manager",
    "iterable_result",
    "registered_plugins",
    "reset_plugin_manager",
]


class PluginLoadWarning(UserWarning):
    """A hook plugin failed to load and was skipped (non-strict mode)."""


class HookError(PluginError):
    """A hook plugin is invalid (e.g. implements a hook that does not exist)."""


class HookCallError(PluginError):
    """A hook implementation raised or returned something the hook does not accept."""


class TrinityPluginManager(pluggy.PluginManager):
    """pluggy's manager for the ``trinity_core`` project, aware of distributions and load failures.

    Attributes:
        failures: hook plugins that failed to load, as :class:`~trinity_core.registry.PluginFailure`.
    """

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.failures: list[PluginFailure] = []
        self._origins: dict[str, EntryPointInfo] = {}
        self._order: dict[str, int] = {}
        self._counter = itertools.count()

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register a module or object of hookimpls; a misspelled hook raises :class:`HookError`."""
        plugin_name = super().register(plugin, name)
        if plugin_name is None:  # blocked
            return None
        self._order.setdefault(plugin_name, next(self._counter))
        self._origins.setdefault(
            plugin_name, EntryPointInfo(HOOKS_NAMESPACE, plugin_name, _describe(plugin), IN_PROCESS, "")
        )
        try:
            self.check_pending()
        except pluggy.PluginValidationError as exc:
            self.unregister(plugin)
            raise HookError(self._pending_message(plugin_name, plugin, exc)) from None
        return plugin_name

    def _pending_message(self, plugin_name: str, plugin: object, exc: Exception) -> str:
        known = sorted(n for n in dir(hookspecs) if n.startswith("trinity_"))
        bad = [n for n in dir(plugin) if n.startswith("trinity_") and n not in known]
        hints = []
        for name in bad:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        origin = self._origins.get(plugin_name)
        where = f" from {origin.provider}" if origin is not None else ""
        unknown = ", ".join(hints) if hints else str(exc)
        return (
            f"hook plugin {plugin_name!r}{where} implements unknown hook(s): {unknown}. "
            f"Known hooks: {', '.join(known)}. Rename the function, or drop its @hookimpl marker."
        )

    def load_entry_points(self, *, strict: bool | None = None) -> None:
        """Load every ``trinity_core.hooks`` entry point, each in isolation.

        A plugin that fails to import (or implements an unknown hook) is recorded in :attr:`failures`;
        with ``strict`` (default: ``TRINITY_STRICT_PLUGINS``) the first failure is raised instead.
        """
        strict = strict_mode() if strict is None else strict
        found, _ = scan_entry_points([HOOKS_NAMESPACE])
        for ep in found[HOOKS_NAMESPACE]:
            if self.get_plugin(ep.name) is not None or ep.name in self._origins:
                continue
            plugin, error = load_one(ep)
            if error is None:
                self._origins[ep.name] = ep
                try:
                    self.register(plugin, name=ep.name)
                except Exception as exc:  # a misspelled hook, a name pluggy refuses
                    error = exc
            if error is not None:  # isolate: one broken hook module must not disable the others
                self._origins.pop(ep.name, None)
                tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
                failure = PluginFailure("hooks", ep, type(error).__name__, str(error), tb)
                if strict:
                    raise PluginLoadError(
                        f"hook plugin {failure.describe()}\nFix or reinstall {ep.distribution}, or block it "
                        f"with {DISABLE_ENV}={ep.distribution}."
                    ) from error
                self.failures.append(failure)
                warnings.warn(
                    f"hook plugin {failure.describe()}; its hooks will not run. Set {DISABLE_ENV}="
                    f"{ep.distribution} to silence this, or fix the plugin.",
                    PluginLoadWarning,
                    stacklevel=2,
                )

    def registration_index(self, plugin_name: str) -> int:
        """Position of ``plugin_name`` in registration order (unknown plugins sort last)."""
        return self._order.get(plugin_name, 1 << 30)

    def origin(self, plugin_name: str) -> EntryPointInfo | None:
        """Where a registered hook plugin comes from (distribution and version, or in-process)."""
        return self._origins.get(plugin_name)

    def ordered_impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        """Non-wrapper implementations of ``hook_name`` in pipeline order (see the hookspec)."""
        caller = getattr(self.hook, hook_name)
        impls = [i for i in caller.get_hookimpls() if not (i.hookwrapper or i.wrapper)]

        def key(impl: pluggy.HookImpl) -> tuple[int, int]:
            group = 0 if impl.tryfirst else 2 if impl.trylast else 1
            return group, self.registration_index(impl.plugin_name)

        return sorted(impls, key=key)

    def describe_impl(self, impl: pluggy.HookImpl) -> str:
        """``plugin 'name' (distribution version)`` of a hook implementation, for messages."""
        origin = self._origins.get(impl.plugin_name)
        provider = f" ({origin.provider})" if origin is not None and origin.distribution != IN_PROCESS else ""
        return f"plugin {impl.plugin_name!r}{provider}"

    def component_registrations(self) -> Iterator[tuple[Registration, EntryPointInfo]]:
        """Registrations yielded by ``trinity_register_components``, each with its plugin's origin."""
        for impl in self.ordered_impls("trinity_register_components"):
            origin = self._origins.get(impl.plugin_name) or EntryPointInfo(
                HOOKS_NAMESPACE, impl.plugin_name, "?", IN_PROCESS, ""
            )
            try:
                produced: list[Any] = list(iterable_result(impl.function()))
            except Exception as exc:
                raise HookCallError(
                    f"trinity_register_components of {self.describe_impl(impl)} raised: {exc!r}"
                ) from exc
            for reg in produced:
                if not isinstance(reg, Registration):
                    raise HookCallError(
                        f"trinity_register_components of {self.describe_impl(impl)} yielded {reg!r}; "
                        "yield trinity_core.registry.Registration(kind, name, obj) records"
                    )
                yield reg, origin


def iterable_result(result: Any) -> Iterable[Any]:
    """A hook's result as an iterable: ``None`` is empty, a single value (or string) is one item."""
    if result is None:
        return ()
    if isinstance(result, str) or not isinstance(result, Iterable):
        return (result,)
    return result


def _describe(plugin: object) -> str:
    name = getattr(plugin, "__name__", None)
    return str(name) if isinstance(name, str) else f"{type(plugin).__module__}:{type(plugin).__qualname__}"


_default: TrinityPluginManager | None = None


def get_plugin_manager() -> TrinityPluginManager:
    """The process-wide plugin manager, with every installed hook plugin loaded (once)."""
    global _default
    if _default is None:
        pm = TrinityPluginManager()
        pm.load_entry_points()
        _default = pm
    return _default


def reset_plugin_manager() -> None:
    """Drop the process-wide plugin manager (tests, or after installing plugins)."""
    global _default
    _default = None


def registered_plugins(pm: TrinityPluginManager) -> Iterable[tuple[str, EntryPointInfo | None]]:
    """``(plugin name, origin)`` of every registered hook plugin, in registration order."""
    names = sorted((n for n, _ in pm.list_name_plugin() if n is not None), key=pm.registration_index)
    return [(n, pm.origin(n)) for n in names]
