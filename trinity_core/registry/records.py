"""Typed records the registry reports: entry points, load failures, components and conflicts."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

__all__ = ["ComponentRecord", "Conflict", "EntryPointInfo", "PluginFailure", "Registration"]


@dataclass(frozen=True)
class EntryPointInfo:
    """One entry point as installed: where it is declared, nothing imported yet.

    Attributes:
        group: the entry-point namespace (``"trinity_core.policy_losses"``).
        name: the entry-point name, i.e. the component name users write in config.
        value: ``"module:attr"``.
        distribution: the distribution that declares it (``"trinity-plugin-sapo"``), or ``"<in-process>"``.
        version: that distribution's version (empty when unknown).
    """

    group: str
    name: str
    value: str
    distribution: str
    version: str

    @property
    def module(self) -> str:
        """The module part of :attr:`value`."""
        return self.value.partition(":")[0].strip()

    @property
    def provider(self) -> str:
        """``"distribution version"``, as messages print it."""
        return f"{self.distribution} {self.version}".strip()


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded, kept so that listings and errors can show it.

    Attributes:
        kind: the component kind, or ``"hooks"`` for a pluggy hook module.
        entry_point: where the plugin is declared.
        error_type: the exception class name (``"ModuleNotFoundError"``).
        message: the exception message.
        traceback: the formatted traceback.
        hint: a "did you mean" for a misspelt module or class in the entry point ("" when none).
    """

    kind: str
    entry_point: EntryPointInfo
    error_type: str
    message: str
    traceback: str
    hint: str = ""

    def describe(self) -> str:
        """One line: ``'name' (module:attr) from dist 1.0: ErrorType: message[; did you mean ...?]``."""
        ep = self.entry_point
        hint = f"; {self.hint}" if self.hint else ""
        return f"{ep.name!r} ({ep.value}) from {ep.provider}: {self.error_type}: {self.message}{hint}"


@dataclass(frozen=True)
class Conflict:
    """One name claimed by more than one provider in one namespace."""

    kind: str
    name: str
    providers: tuple[EntryPointInfo, ...]

    def describe(self) -> str:
        """Names every provider and the ways out."""
        who = " and ".join(p.provider for p in self.providers)
        dists = ",".join(sorted({p.distribution for p in self.providers}))
        return (
            f"{self.kind} {self.name!r} is registered by both {who}; uninstall one of them "
            f"(pip uninstall ...) or block one with TRINITY_DISABLE_PLUGINS=<distribution> "
            f"(one of: {dists})"
        )


@dataclass(frozen=True)
class ComponentRecord:
    """A component as the registry knows it.

    Attributes:
        kind: the component kind.
        name: the registered name.
        obj: the loaded class (or callable), ``None`` when loading failed.
        entry_point: where it is declared (an ``"<in-process>"`` distribution for :func:`register`).
        error: the load failure, when ``obj`` is ``None``.
    """

    kind: str
    name: str
    obj: Any
    entry_point: EntryPointInfo
    error: PluginFailure | None = None

    @property
    def value(self) -> str:
        """The entry-point value ``module:attr``."""
        return self.entry_point.value

    @property
    def distribution(self) -> str:
        """The providing distribution."""
        return self.entry_point.distribution

    @property
    def version(self) -> str:
        """The providing distribution's version."""
        return self.entry_point.version

    @property
    def summary(self) -> str:
        """The component's ``summary()``, else the first docstring line, else ``""``."""
        if self.obj is None:
            return ""
        summary = getattr(self.obj, "summary", None)
        if callable(summary):
            try:
                return str(summary())
            except Exception:  # a broken summary() must not break a listing
                pass
        doc = inspect.getdoc(self.obj) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    @property
    def paper(self) -> str | None:
        """The component's ``paper`` citation, if it declares one."""
        paper = getattr(self.obj, "paper", None)
        return paper if isinstance(paper, str) else None


@dataclass(frozen=True)
class Registration:
    """What a ``trinity_register_components`` hook yields: register ``obj`` as ``kind``/``name``.

    Example::

        @hookimpl
        def trinity_register_components():
            yield Registration("policy_loss", "my_loss", MyLoss)
    """

    kind: str
    name: str
    obj: Any
    replace: bool = False
