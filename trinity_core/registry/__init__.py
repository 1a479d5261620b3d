"""Plugin discovery: named components of every kind, found through entry points.

One entry-point namespace per kind (``trinity_core.policy_losses``, ...; see :func:`kinds`); the
entry-point name is the name users write in config. :func:`resolve` imports only the plugin that
provides the name; :func:`list_components` loads each plugin in isolation and reports failures instead
of raising (unless ``TRINITY_STRICT_PLUGINS=1``). Entry points are listed and imported through
stevedore; ``importlib.metadata`` only names the distribution and version behind each. The module-level
functions use one process-wide :class:`Registry` that also collects ``trinity_register_components``
hook registrations from the pluggy manager in :mod:`trinity_core.registry.hook_plugins`.

Example::

    from trinity_core import registry

    loss = registry.create("policy_loss", "ppo", {"clip_range": 0.2}, backend="verl")
    for rec in registry.list_components("policy_loss"):
        print(rec.name, rec.distribution, rec.version, rec.summary, rec.error)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

import trinity_core.registry.errors as errors
import trinity_core.registry.records as records
from trinity_core.registry.api import PLUGIN_API_VERSION
from trinity_core.registry.core import IN_PROCESS, HookSource, Registry, validate_component_args
from trinity_core.registry.discovery import (
    DISABLE_ENV,
    STRICT_ENV,
    disabled_distributions,
    normalize_distribution,
    strict_mode,
)
from trinity_core.registry.errors import *  # noqa: F403  (errors.__all__, re-exported below)
from trinity_core.registry.hook_plugins import get_plugin_manager
from trinity_core.registry.kinds import HOOKS_NAMESPACE, KindSpec, get_kind, kinds, register_kind
from trinity_core.registry.records import *  # noqa: F403  (records.__all__, re-exported below)

__all__ = [
    "DISABLE_ENV",
    "HOOKS_NAMESPACE",
    "IN_PROCESS",
    "PLUGIN_API_VERSION",
    "STRICT_ENV",
    "HookSource",
    "KindSpec",
    "Registry",
    "conflicts",
    "create",
    "disabled_distributions",
    "get_kind",
    "get_registry",
    "kinds",
    "list_components",
    "normalize_distribution",
    "record",
    "register",
    "register_kind",
    "reset_registry",
    "resolve",
    "strict_mode",
    "unregister",
    "validate_args",
    "validate_component_args",
]
__all__ += errors.__all__ + records.__all__


def _hook_registrations() -> Iterable[tuple[records.Registration, records.EntryPointInfo]]:
    return get_plugin_manager().component_registrations()


_default: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry (created on first use, with hook registrations)."""
    global _default
    if _default is None:
        _default = Registry(hook_source=_hook_registrations)
    return _default


def reset_registry() -> None:
    """Drop the process-wide registry: scanning, loaded plugins and in-process registrations."""
    global _default
    _default = None


def resolve(kind: str, name: str) -> Any:
    """The class registered as ``kind``/``name``; imports only its plugin. See :meth:`Registry.record`."""
    return get_registry().resolve(kind, name)


def record(kind: str, name: str) -> records.ComponentRecord:
    """The loaded component with its distribution, version, summary and paper."""
    return get_registry().record(kind, name)


def create(kind: str, name: str, args: Mapping[str, Any] | None = None, **runtime: Any) -> Any:
    """Build a component from validated ``args`` (merged per key over its ``Args`` defaults)."""
    return get_registry().create(kind, name, args, **runtime)


def validate_args(kind: str, name: str, args: Mapping[str, Any] | None = None) -> BaseModel | None:
    """Validate ``args`` for ``kind``/``name``; raises :class:`ComponentArgsError`."""
    return get_registry().validate_args(kind, name, args)


def list_components(kind: str | None = None, *, strict: bool | None = None) -> list[records.ComponentRecord]:
    """All components, each plugin loaded in isolation; see :meth:`Registry.list_components`."""
    return get_registry().list_components(kind, strict=strict)


def conflicts(kind: str | None = None) -> list[records.Conflict]:
    """Names claimed by more than one provider."""
    return get_registry().conflicts(kind)


def register(kind: str, name: str, obj: Any, *, replace: bool = False) -> records.ComponentRecord:
    """Register ``obj`` in-process; see :meth:`Registry.register`."""
    return get_registry().register(kind, name, obj, replace=replace)


def unregister(kind: str, name: str) -> None:
    """Drop an in-process registration."""
    get_registry().unregister(kind, name)
