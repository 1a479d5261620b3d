"""Calling trinity-core's pluggy hooks: the experience pipeline, config checks, metric observers.

The plugin manager itself (:class:`TrinityPluginManager`, :func:`get_plugin_manager`) lives in
:mod:`trinity_core.registry.hook_plugins`, since the registry pulls component registrations from it; it
is re-exported here, where the trainer and the config resolver import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity_core.registry.hook_plugins import (
    HookCallError,
    HookError,
    PluginLoadWarning,
    TrinityPluginManager,
    get_plugin_manager,
    iterable_result,
    registered_plugins,
    reset_plugin_manager,
)

__all__ = [
    "HookCallError",
    "HookError",
    "PluginLoadWarning",
    "TrinityPluginManager",
    "collect_config_problems",
    "get_plugin_manager",
    "notify_metrics",
    "registered_plugins",
    "reset_plugin_manager",
    "run_experience_pipeline",
]


def run_experience_pipeline(pm: TrinityPluginManager, experiences: list[Any], step: int) -> list[Any]:
    """Pass ``experiences`` through every ``trinity_process_experiences`` stage, in pipeline order.

    Each stage receives the list the previous stage returned (``None`` keeps the list unchanged).

    Raises:
        HookCallError: a stage raised or returned something other than a list or ``None``.
    """
    current = list(experiences)
    for impl in pm.ordered_impls("trinity_process_experiences"):
        try:
            result = impl.function(experiences=current, step=step)
        except Exception as exc:
            raise HookCallError(
                f"trinity_process_experiences of {pm.describe_impl(impl)} raised at step {step}: {exc!r}"
            ) from exc
        if result is None:
            continue
        if not isinstance(result, list):
            raise HookCallError(
                f"trinity_process_experiences of {pm.describe_impl(impl)} returned {type(result).__name__}; "
                "return a list of experiences, or None to leave them unchanged"
            )
        current = result
    return current


def collect_config_problems(pm: TrinityPluginManager, config: Any) -> list[str]:
    """Problems reported by every ``trinity_check_config`` implementation, prefixed with the plugin."""
    problems: list[str] = []
    for impl in pm.ordered_impls("trinity_check_config"):
        try:
            found: list[Any] = list(iterable_result(impl.function(config=config)))
        except Exception as exc:
            problems.append(f"{pm.describe_impl(impl)}: trinity_check_config raised {exc!r}")
            continue
        problems.extend(f"{pm.describe_impl(impl)}: {p}" for p in found)
    return problems


def notify_metrics(pm: TrinityPluginManager, step: int, metrics: Mapping[str, float]) -> None:
    """Call every ``trinity_on_metrics`` observer with the step's metrics."""
    pm.hook.trinity_on_metrics(step=step, metrics=dict(metrics))
