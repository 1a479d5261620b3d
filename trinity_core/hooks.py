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


def _call(impl: Any, **arguments: Any) -> Any:
    """Call one hook implementation with the arguments it declares, as pluggy does."""
    return impl.function(*(arguments[name] for name in impl.argnames))


def run_experience_pipeline(pm: TrinityPluginManager, experiences: list[Any], step: int) -> list[Any]:
    """Pass ``experiences`` through every ``trinity_process_experiences`` stage, in pipeline order.

    Each stage receives the list the previous stage returned (``None`` keeps the list unchanged).

    Raises:
        HookCallError: a stage raised or exited, returned something other than a list of experiences or
            ``None``, or dropped every experience of the step (the learner would have nothing to train on).
    """
    from trinity_core.experience import Experience

    current = list(experiences)
    for impl in pm.ordered_impls("trinity_process_experiences"):
        where = f"trinity_process_experiences of {pm.describe_impl(impl)} at step {step}"
        try:
            result = _call(impl, experiences=current, step=step)
        except SystemExit as exc:
            raise HookCallError(
                f"{where} called sys.exit({exc.code!r}); raise an exception with a reason"
            ) from None
        except Exception as exc:
            raise HookCallError(f"{where} raised {exc!r}") from exc
        if result is None:
            continue
        if not isinstance(result, list):
            raise HookCallError(
                f"{where} returned {type(result).__name__}; return a list of experiences, or None to leave "
                "them unchanged"
            )
        wrong = next(((i, item) for i, item in enumerate(result) if not isinstance(item, Experience)), None)
        if wrong is not None:
            raise HookCallError(
                f"{where} returned a list whose item {wrong[0]} is {type(wrong[1]).__name__}, not an "
                "Experience; return the experiences to keep"
            )
        if current and not result:
            raise HookCallError(
                f"{where} dropped every experience of the step (returned an empty list): the learner would "
                "have nothing to train on; keep some, or raise with the reason"
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
    """Call every ``trinity_on_metrics`` observer with the step's metrics.

    Raises:
        HookCallError: an observer raised or called ``sys.exit`` (naming its plugin and the step).
    """
    for impl in pm.ordered_impls("trinity_on_metrics"):
        where = f"trinity_on_metrics of {pm.describe_impl(impl)} after step {step}"
        try:
            _call(impl, step=step, metrics=dict(metrics))
        except SystemExit as exc:
            raise HookCallError(
                f"{where} called sys.exit({exc.code!r}); an observer stops a run by raising with the reason"
            ) from None
        except Exception as exc:
            raise HookCallError(f"{where} raised {exc!r}") from exc
