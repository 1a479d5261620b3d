"""The component registry: resolve one name lazily, list everything in isolation, detect conflicts.

Naming rule: on first load the registry sets ``cls._name = name`` only when the class does not define
``_name`` itself, so a class registered under two names keeps the first name it was loaded under as
``name()``; :class:`ComponentRecord` always carries the name it was looked up by.
"""

from __future__ import annotations

import contextlib
import difflib
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from trinity_core.registry.api import api_problem
from trinity_core.registry.args import validation_problems
from trinity_core.registry.discovery import DISABLE_ENV, scan_entry_points, strict_mode
from trinity_core.registry.errors import (
    ComponentArgsError,
    PluginConflictError,
    PluginLoadError,
    UnknownComponentError,
)
from trinity_core.registry.hints import entry_point_hint
from trinity_core.registry.kinds import KindSpec, get_kind, kind_bases, kinds
from trinity_core.registry.loading import Loaded, load_all, load_one
from trinity_core.registry.records import (
    ComponentRecord,
    Conflict,
    EntryPointInfo,
    PluginFailure,
    Registration,
)
from trinity_core.registry.retired import retired_message
from trinity_core.registry.shipped import install_hint

__all__ = ["IN_PROCESS", "HookSource", "Registry"]

IN_PROCESS = "<in-process>"
"""Distribution name of components registered with :meth:`Registry.register`."""

HookSource = Callable[[], Iterable[tuple[Registration, EntryPointInfo]]]
"""Yields registrations from ``trinity_register_components`` hooks, each with its hook plugin."""


def _set_name(obj: Any, name: str) -> None:
    if isinstance(obj, type) and "_name" not in obj.__dict__:
        # Write-once metaclasses or builtins may refuse: the record still carries the name.
        with contextlib.suppress(AttributeError, TypeError):
            obj._name = name  # type: ignore[attr-defined]


def _failure(kind: str, ep: EntryPointInfo, exc: BaseException) -> PluginFailure:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return PluginFailure(kind, ep, type(exc).__name__, str(exc), tb, entry_point_hint(ep.value, exc) or "")


class Registry:
    """Named components of every kind, from entry points and in-process registrations.

    Entry points are scanned once per registry (call :meth:`refresh` after installing plugins in a
    running process); each loaded entry point is cached, failures included, so a broken plugin is
    imported at most once.

    Args:
        hook_source: where ``trinity_register_components`` registrations come from; pulled once, on
            first lookup. ``None`` (the default for new registries) means no hooks.
        entry_points: scan installed distributions (the default). ``False`` gives a registry of
            in-process registrations only, whatever is installed: for tests and notebooks that need an
            exact set of components.
    """

    def __init__(self, hook_source: HookSource | None = None, *, entry_points: bool = True) -> None:
        self._lock = threading.RLock()
        self._hook_source = hook_source
        self._use_entry_points = entry_points
        self._hooks_pulled = False
        self._scan: dict[str, list[EntryPointInfo]] | None = None
        self._disabled: list[EntryPointInfo] = []
        self._loaded: dict[EntryPointInfo, ComponentRecord] = {}
        self._in_process: dict[tuple[str, str], list[tuple[ComponentRecord, bool]]] = {}

    # -- discovery -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Forget scanned entry points and loaded plugins (in-process registrations stay)."""
        with self._lock:
            self._scan = None
            self._disabled = []
            self._loaded.clear()

    def _entry_points(self, spec: KindSpec) -> list[EntryPointInfo]:
        if not self._use_entry_points:
            return []
        with self._lock:
            if self._scan is None:
                self._scan, self._disabled = scan_entry_points(k.namespace for k in kinds())
            if spec.namespace not in self._scan:  # a kind registered after the scan
                found, disabled = scan_entry_points([spec.namespace])
                self._scan.update(found)
                self._disabled.extend(disabled)
            return self._scan[spec.namespace]

    def _pull_hooks(self) -> None:
        if self._hooks_pulled or self._hook_source is None:
            return
        self._hooks_pulled = True  # set first: a hook module may itself look components up
        for reg, origin in self._hook_source():
            spec = get_kind(reg.kind)
            ep = EntryPointInfo(spec.namespace, reg.name, origin.value, origin.distribution, origin.version)
            problem = self._type_problem(spec, reg.obj)
            if problem is None:
                _set_name(reg.obj, reg.name)
                record = ComponentRecord(reg.kind, reg.name, reg.obj, ep)
            else:
                failure = _failure(spec.kind, ep, TypeError(f"{problem} (yielded by a hook)"))
                record = ComponentRecord(reg.kind, reg.name, None, ep, failure)
            self._add_in_process(record, reg.replace)

    def names(self, kind: str) -> list[str]:
        """Registered names of ``kind`` (entry points and in-process), without importing any plugin."""
        spec = get_kind(kind)
        self._pull_hooks()
        found = {ep.name for ep in self._entry_points(spec)}
        found.update(name for (k, name) in self._in_process if k == kind)
        return sorted(found)

    def disabled(self) -> list[EntryPointInfo]:
        """Entry points ignored because their distribution is listed in ``TRINITY_DISABLE_PLUGINS``."""
        for spec in kinds():
            self._entry_points(spec)
        return list(self._disabled)

    def _providers(self, spec: KindSpec, name: str) -> list[ComponentRecord | EntryPointInfo]:
        local = self._in_process.get((spec.kind, name), [])
        winners = [rec for rec, replace in local if replace]
        if winners:
            return [winners[-1]]
        providers: list[ComponentRecord | EntryPointInfo] = [rec for rec, _ in local]
        providers.extend(ep for ep in self._entry_points(spec) if ep.name == name)
        return providers

    def conflicts(self, kind: str | None = None) -> list[Conflict]:
        """Every name claimed by more than one provider (no plugin is imported to find them)."""
        self._pull_hooks()
        out: list[Conflict] = []
        for spec in [get_kind(kind)] if kind else kinds():
            for name in self.names(spec.kind):
                providers = self._providers(spec, name)
                if len(providers) > 1:
                    infos = tuple(p.entry_point if isinstance(p, ComponentRecord) else p for p in providers)
                    out.append(Conflict(spec.kind, name, infos))
        return out

    # -- loading ---------------------------------------------------------------------------------

    def _load(self, spec: KindSpec, ep: EntryPointInfo) -> ComponentRecord:
        """The record of ``ep``, importing only its module (stevedore's ``DriverManager``)."""
        with self._lock:
            cached = self._loaded.get(ep)
            if cached is None:
                cached = self._loaded[ep] = self._record(spec, ep, load_one(ep))
            return cached

    def _load_kind(self, spec: KindSpec) -> list[ComponentRecord]:
        """Records of every entry point of ``spec``; those not yet loaded are imported by one
        stevedore ``ExtensionManager``, each in isolation."""
        eps = self._entry_points(spec)
        with self._lock:
            todo = [ep for ep in eps if ep not in self._loaded]
            if todo:
                loaded = load_all(spec.namespace, todo)
                for ep in todo:
                    self._loaded[ep] = self._record(spec, ep, loaded[(ep.name, ep.value)])
            return [self._loaded[ep] for ep in eps]

    def _record(self, spec: KindSpec, ep: EntryPointInfo, loaded: Loaded) -> ComponentRecord:
        obj, error = loaded
        if error is None:
            problem = self._type_problem(spec, obj)
            mismatch = api_problem(obj) if problem is None else None
            if problem is None and mismatch is None:
                _set_name(obj, ep.name)
                return ComponentRecord(spec.kind, ep.name, obj, ep)
            error = TypeError(problem) if problem else ImportError(mismatch)
        return ComponentRecord(spec.kind, ep.name, None, ep, _failure(spec.kind, ep, error))

    @staticmethod
    def _type_problem(spec: KindSpec, obj: Any) -> str | None:
        bases = kind_bases(spec.kind)
        if bases and not (isinstance(obj, type) and issubclass(obj, bases)):
            expected = " or ".join(b.__name__ for b in bases)
            return f"{obj!r} is not a subclass of {expected}, the base class of every {spec.title}"
        return spec.check(obj) if spec.check is not None else None

    def record(self, kind: str, name: str) -> ComponentRecord:
        """The loaded component ``kind``/``name`` with its provenance; imports only that plugin's module.

        Raises:
            UnknownComponentError: nothing provides the name (the message lists what is installed).
            PluginConflictError: two providers claim the name.
            PluginLoadError: the providing plugin fails to import or is of the wrong type.
        """
        spec = get_kind(kind)
        self._pull_hooks()
        providers = self._providers(spec, name)
        if not providers:
            raise UnknownComponentError(retired_message(spec, name) or self._unknown_message(spec, name))
        if len(providers) > 1:
            infos = tuple(p.entry_point if isinstance(p, ComponentRecord) else p for p in providers)
            raise PluginConflictError(Conflict(spec.kind, name, infos).describe())
        found = providers[0]
        record = found if isinstance(found, ComponentRecord) else self._load(spec, found)
        if record.error is not None:
            raise PluginLoadError(self._load_message(record.error), record.error.traceback)
        return record

    def resolve(self, kind: str, name: str) -> Any:
        """The class (or callable) registered as ``kind``/``name``; see :meth:`record` for errors."""
        return self.record(kind, name).obj

    @staticmethod
    def _load_message(failure: PluginFailure) -> str:
        ep = failure.entry_point
        return (
            f"{failure.kind} plugin {failure.describe()}\n"
            f"Fix or reinstall {ep.distribution}, or block it with {DISABLE_ENV}={ep.distribution} "
            "(--debug shows the plugin's traceback)."
        )

    def _unknown_message(self, spec: KindSpec, name: str) -> str:
        # Diagnosing an unknown name is the one place where unrelated plugins of this kind get imported.
        failed = self.failures(spec.kind)
        broken = {f.entry_point.name for f in failed}
        installed = [n for n in self.names(spec.kind) if n not in broken]
        lines = [
            f"unknown {spec.title} {name!r} (kind {spec.kind!r}, entry-point namespace {spec.namespace})."
        ]
        close = difflib.get_close_matches(name, installed, n=3)
        if close:
            lines.append("Did you mean " + " or ".join(repr(c) for c in close) + "?")
        lines.append(f"Installed {spec.title} names: {', '.join(installed) or '(none)'}.")
        shipped = install_hint(spec.namespace, name)
        if shipped and name not in self.names(spec.kind):
            lines.append(shipped)
        elsewhere = [k.kind for k in kinds() if k.kind != spec.kind and name in self.names(k.kind)]
        if elsewhere:
            lines.append(f"{name!r} exists as kind {', '.join(elsewhere)}.")
        if failed:
            lines.append(f"{spec.title} plugins that failed to load:")
            lines.extend(f"  {f.describe()}" for f in failed)
        blocked = [ep for ep in self.disabled() if ep.group == spec.namespace]
        if blocked:
            lines.append(
                f"Blocked by {DISABLE_ENV}: " + ", ".join(f"{e.name!r} ({e.provider})" for e in blocked)
            )
        lines.append(
            "Install the distribution that provides it, or register a class in-process with "
            f"trinity_core.registry.register({spec.kind!r}, {name!r}, cls)."
        )
        return "\n".join(lines)

    # -- listing ---------------------------------------------------------------------------------

    def list_components(
        self, kind: str | None = None, *, strict: bool | None = None
    ) -> list[ComponentRecord]:
        """Every component (of ``kind``, or all kinds), each entry point loaded in isolation.

        A plugin that fails to load appears with ``obj=None`` and ``error`` set; a conflicting name
        appears once per provider. With ``strict`` (default: ``TRINITY_STRICT_PLUGINS``) any failure
        raises :class:`PluginLoadError` and any conflict :class:`PluginConflictError`, after all plugins
        were tried, naming all of them.
        """
        self._pull_hooks()
        specs = [get_kind(kind)] if kind else kinds()
        records: list[ComponentRecord] = []
        for spec in specs:
            records.extend(self._load_kind(spec))
            for (k, _), local in sorted(self._in_process.items()):
                if k == spec.kind:
                    records.extend(rec for rec, _ in local)
        if strict if strict is not None else strict_mode():
            self._raise_if_unhealthy(records, kind)
        return records

    def _raise_if_unhealthy(self, records: list[ComponentRecord], kind: str | None) -> None:
        failures = [r.error for r in records if r.error is not None]
        if failures:
            raise PluginLoadError(
                "strict plugin mode: plugins failed to load:\n"
                + "\n".join(f"  {f.kind} {f.describe()}" for f in failures)
            )
        conflicts = self.conflicts(kind)
        if conflicts:
            raise PluginConflictError(
                "strict plugin mode:\n" + "\n".join(f"  {c.describe()}" for c in conflicts)
            )

    def failures(self, kind: str | None = None) -> list[PluginFailure]:
        """Load failures of ``kind`` (or all kinds); loads every entry point of those kinds to find them."""
        return [r.error for r in self.list_components(kind, strict=False) if r.error is not None]

    # -- in-process registration -----------------------------------------------------------------

    def register(self, kind: str, name: str, obj: Any, *, replace: bool = False) -> ComponentRecord:
        """Register ``obj`` as ``kind``/``name`` in this process (notebooks, tests, hook plugins).

        Registering the same object twice is a no-op. A name already provided by an installed plugin
        or another in-process registration is a :class:`PluginConflictError` unless ``replace=True``,
        which makes this registration win over every other provider of the name.
        """
        spec = get_kind(kind)
        problem = self._type_problem(spec, obj)
        if problem is not None:
            raise PluginLoadError(f"cannot register {spec.title} {name!r}: {problem}")
        self._pull_hooks()
        ep = EntryPointInfo(spec.namespace, name, _qualname(obj), IN_PROCESS, "")
        record = ComponentRecord(kind, name, obj, ep)
        with self._lock:
            local = self._in_process.get((kind, name), [])
            if any(rec.obj is obj for rec, _ in local):
                return record
            others = self._providers(spec, name)
            if others and not replace:
                who = ", ".join(
                    (p.entry_point if isinstance(p, ComponentRecord) else p).provider
                    + f" ({(p.entry_point if isinstance(p, ComponentRecord) else p).value})"
                    for p in others
                )
                raise PluginConflictError(
                    f"{spec.title} {name!r} is already provided by {who}; pass replace=True to override "
                    f"it in this process, or register under another name"
                )
            self._add_in_process(record, replace)
        _set_name(obj, name)
        return record

    def _add_in_process(self, record: ComponentRecord, replace: bool) -> None:
        self._in_process.setdefault((record.kind, record.name), []).append((record, replace))

    def in_process(self) -> list[tuple[ComponentRecord, bool]]:
        """The in-process registrations as ``(record, replace)``, e.g. to repeat them in another process."""
        with self._lock:
            return [entry for entries in self._in_process.values() for entry in entries]

    def unregister(self, kind: str, name: str) -> None:
        """Drop in-process registrations of ``kind``/``name`` (installed plugins are unaffected)."""
        with self._lock:
            self._in_process.pop((kind, name), None)

    # -- construction ----------------------------------------------------------------------------

    def validate_args(self, kind: str, name: str, args: Mapping[str, Any] | None = None) -> BaseModel | None:
        """Validate ``args`` per key over the component's ``Args`` defaults; ``None`` if it has no Args.

        Raises:
            ComponentArgsError: naming the component, its distribution and every bad key.
        """
        return validate_component_args(self.record(kind, name), args)

    def create(self, kind: str, name: str, args: Mapping[str, Any] | None = None, **runtime: Any) -> Any:
        """Build ``kind``/``name`` from validated ``args`` plus runtime objects (``writer``, ``backend``)."""
        record = self.record(kind, name)
        validated = validate_component_args(record, args)
        values = validated.model_dump() if validated is not None else {}
        factory = getattr(record.obj, "from_args", None)
        if callable(factory) and validated is not None:
            return factory(values, **runtime)
        return record.obj(**values, **runtime)


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    return f"{module}:{getattr(obj, '__qualname__', type(obj).__name__)}"


def validate_component_args(record: ComponentRecord, args: Mapping[str, Any] | None) -> BaseModel | None:
    """Validate ``args`` against ``record.obj.Args`` (see :meth:`Registry.validate_args`)."""
    model = getattr(record.obj, "Args", None)
    where = f"{get_kind(record.kind).title} {record.name!r} ({record.entry_point.provider})"
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        if args:
            keys = ", ".join(sorted(args))
            raise ComponentArgsError(
                f"{where} takes no arguments; remove: {keys}", [(k, "unknown key") for k in args]
            )
        return None
    if args is not None and not isinstance(args, Mapping):
        raise ComponentArgsError(f"{where}: arguments must be a mapping, got {type(args).__name__}", [])
    try:
        return model.model_validate(dict(args or {}))
    except ValidationError as exc:
        problems = validation_problems(exc, model=model)
        detail = "; ".join(f"{k}: {m}" for k, m in problems)
        raise ComponentArgsError(f"invalid arguments for {where}: {detail}", problems) from None
