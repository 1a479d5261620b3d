"""Component kinds: each kind is one entry-point namespace with an optional base class."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from trinity_core.registry.errors import PluginError

__all__ = ["HOOKS_NAMESPACE", "KindSpec", "get_kind", "kind_bases", "kinds", "register_kind"]

HOOKS_NAMESPACE = "trinity_core.hooks"
"""Entry-point namespace of pluggy hook modules (see :mod:`trinity_core.hooks`)."""


@dataclass(frozen=True)
class KindSpec:
    """One kind of named component.

    Attributes:
        kind: the kind name used by the API and ``--kind`` (``"policy_loss"``).
        namespace: the entry-point group plugins register under (``"trinity_core.policy_losses"``).
        title: the kind in words, for messages (``"policy loss"``).
        check: optional extra check of a loaded object; returns a problem text or ``None``.
    """

    kind: str
    namespace: str
    title: str
    check: Callable[[object], str | None] | None = None


def _must_be_callable(obj: object) -> str | None:
    return None if callable(obj) else f"expected a callable, got {type(obj).__name__}"


def _must_be_task(obj: object) -> str | None:
    # Duck-typed (the registry never imports the trainer): what trinity train calls on a task set.
    missing = [name for name in ("sample", "fields") if not hasattr(obj, name)]
    if missing or not callable(obj):
        return f"expected a task class with sample() and fields (trinity_core.train.Task); missing {missing}"
    return None


def _must_be_workflow(obj: object) -> str | None:
    # Duck-typed like tasks: a class the explorer instantiates per task and runs.
    if not isinstance(obj, type) or not callable(getattr(obj, "run", None)):
        return "expected a workflow class with run() (trinity_core.components.Workflow)"
    return None


_KINDS: dict[str, KindSpec] = {
    spec.kind: spec
    for spec in (
        KindSpec("algorithm", "trinity_core.algorithms", "algorithm"),
        KindSpec("advantage_fn", "trinity_core.advantage_fns", "advantage function"),
        KindSpec("add_strategy", "trinity_core.add_strategies", "add strategy"),
        KindSpec("policy_loss", "trinity_core.policy_losses", "policy loss"),
        KindSpec("kl_fn", "trinity_core.kl_fns", "KL function"),
        KindSpec("entropy_loss", "trinity_core.entropy_losses", "entropy loss"),
        KindSpec("value_loss", "trinity_core.value_losses", "value loss"),
        KindSpec("reward_fn", "trinity_core.reward_fns", "reward function", _must_be_callable),
        KindSpec("task", "trinity_core.tasks", "task set", _must_be_task),
        KindSpec("workflow", "trinity_core.workflows", "workflow", _must_be_workflow),
        KindSpec("task_selector", "trinity_core.task_selectors", "task selector"),
        KindSpec("operator", "trinity_core.experience_operators", "experience operator"),
        KindSpec("priority_fn", "trinity_core.priority_fns", "priority function"),
        KindSpec("tool_parser", "trinity_core.tool_parsers", "tool parser"),
    )
}


def kinds() -> list[KindSpec]:
    """All known kinds, in declaration order."""
    return list(_KINDS.values())


def get_kind(kind: str) -> KindSpec:
    """The spec of ``kind``; raises :class:`PluginError` listing the known kinds when it is unknown."""
    try:
        return _KINDS[kind]
    except KeyError:
        known = ", ".join(_KINDS)
        raise PluginError(f"unknown component kind {kind!r}; known kinds: {known}") from None


def register_kind(spec: KindSpec, *, replace: bool = False) -> None:
    """Add a kind (the trainer adds its own); re-registering an existing kind needs ``replace=True``."""
    if spec.kind in _KINDS and _KINDS[spec.kind] != spec and not replace:
        raise PluginError(
            f"component kind {spec.kind!r} is already registered; pass replace=True to change it"
        )
    _KINDS[spec.kind] = spec


def kind_bases(kind: str) -> tuple[type, ...]:
    """Base classes a component of ``kind`` must subclass (empty: no class check).

    Read from ``trinity_core.components.KIND_BASES`` on first use, so that the registry itself never
    imports torch; an absent or not yet importable components package means no class check.
    """
    try:
        components = importlib.import_module("trinity_core.components")
    except ImportError:
        return ()
    table = getattr(components, "KIND_BASES", {})
    bases = table.get(kind, ()) if isinstance(table, dict) else ()
    if isinstance(bases, type):
        return (bases,)
    return tuple(b for b in bases if isinstance(b, type))
