"""pluggy hook specifications of trinity-core, and the markers plugins use.

A hook plugin is a module of functions decorated with :data:`hookimpl`, declared as an entry point in
the ``trinity_core.hooks`` namespace::

    # pyproject.toml of the plugin
    [project.entry-points."trinity_core.hooks"]
    my_shaping = "my_pkg.hooks"

Every hook name starts with ``trinity_``; a misspelled name is an error when the plugin is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pluggy

__all__ = [
    "PROJECT_NAME",
    "hookimpl",
    "hookspec",
    "trinity_check_config",
    "trinity_on_metrics",
    "trinity_process_experiences",
    "trinity_register_components",
]

PROJECT_NAME = "trinity_core"
"""The pluggy project name shared by the markers and the plugin manager."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marker of hook specifications (used by this module only)."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marker plugins put on their hook implementations: ``@hookimpl`` or ``@hookimpl(tryfirst=True)``."""


@hookspec
def trinity_check_config(config: Any) -> Iterable[str] | None:
    """Report problems with a resolved run configuration (cross-field rules).

    Called by :func:`trinity_core.config.resolve_config` after every component's arguments validated
    and the algorithm preset's ``check_config`` ran. All implementations are called (not firstresult);
    each returns (or yields) human-readable problems, or ``None`` when the config is fine. Problems of
    every plugin are collected into one :class:`~trinity_core.config.ConfigError`, prefixed with the
    plugin name.

    Args:
        config: the :class:`~trinity_core.config.ResolvedConfig`; read it, do not modify it.

    Returns:
        An iterable of problem texts, or ``None``.

    Example::

        @hookimpl
        def trinity_check_config(config):
            if config.algorithm.repeat_times < 4 and config.algorithm.advantage_fn == "grpo":
                yield "algorithm.repeat_times: GRPO needs at least 4 responses per task to be stable"

    .. versionadded:: 0.1.0
    """


@hookspec
def trinity_process_experiences(experiences: list[Any], step: int) -> list[Any] | None:
    """A pipeline stage over the experiences of one step, before the add strategy / advantage function.

    The stages run together as the ``hooks`` operator of ``rollout.experience_pipeline``: first, unless
    the pipeline lists ``hooks`` elsewhere (docs/buffer.md). Not firstresult: every implementation
    runs, as a chain. Use :func:`trinity_core.hooks.run_experience_pipeline`, which passes each stage
    the list returned by the previous one. Order: ``tryfirst`` stages, then the others, then
    ``trylast`` stages; within each group, plugins run in registration order (entry points sorted by
    distribution and entry-point name, then in-process registrations in the order they were made).

    Args:
        experiences: the current list of :class:`~trinity_core.experience.Experience`.
        step: the training step the experiences belong to.

    Returns:
        A new list (filtered, reordered, re-rewarded), or ``None`` to leave the list unchanged.

    Example::

        import torch

        @hookimpl
        def trinity_process_experiences(experiences, step):
            # mask the loss of truncated responses
            for exp in experiences:
                if exp.truncate_status == "response_truncated":
                    exp.action_mask = torch.zeros_like(exp.action_mask)
            return experiences

    .. versionadded:: 0.1.0
    """


@hookspec
def trinity_on_metrics(step: int, metrics: Mapping[str, float]) -> None:
    """Observe the metrics of one training step (loggers, early stopping, dashboards).

    All implementations are called (not firstresult), after the trainer materialized the step's
    metrics as Python floats. Raise to abort the run.

    Args:
        step: the training step that just finished.
        metrics: metric name -> value, e.g. ``{"actor/pg_loss": 0.12, "reward/mean": 0.8}``.

    Returns:
        ``None``; any return value is ignored.

    Example::

        @hookimpl
        def trinity_on_metrics(step, metrics):
            print(step, metrics.get("reward/mean"))

    .. versionadded:: 0.1.0
    """


@hookspec
def trinity_register_components() -> Iterable[Any] | None:
    """Register components in-process, without packaging them as entry points.

    All implementations are called once (not firstresult), the first time the process-wide registry
    looks anything up. Each returns (or yields) :class:`~trinity_core.registry.Registration` records.
    A registered name that an installed plugin also provides is a conflict unless the record says
    ``replace=True``.

    Args:
        none.

    Returns:
        An iterable of :class:`~trinity_core.registry.Registration`, or ``None``.

    Example::

        from trinity_core.registry import Registration

        @hookimpl
        def trinity_register_components():
            yield Registration("policy_loss", "my_ppo", MyPPOLoss)

    .. versionadded:: 0.1.0
    """
