"""Resolution's check of the buffer pillar's components: every task selector, experience operator and
priority function a run names is installed and its arguments validate (``trinity config validate``
reports them before a run starts)."""

from __future__ import annotations

from typing import Any

from trinity_core.config.errors import ConfigProblem
from trinity_core.config.models import RunConfig
from trinity_core.registry import ComponentArgsError, PluginError, Registry

__all__ = ["buffer_problems"]


def _named(config: RunConfig) -> list[tuple[str, str, str, dict[str, Any]]]:
    """``(kind, config path of the name, name, args)`` of every buffer component ``config`` names."""
    tasks, found = config.tasks, []
    selected = tasks.mix or tasks.pool_size is not None or tasks.selector != "shuffle" or tasks.selector_args
    if selected:  # otherwise the task set is read as it is, no selector built
        found.append(("task_selector", "tasks.selector", tasks.selector, tasks.selector_args))
    for i, entry in enumerate(tasks.mix or []):
        if entry.selector is not None or entry.selector_args is not None:
            name = entry.selector or tasks.selector
            args = entry.selector_args if entry.selector_args is not None else tasks.selector_args
            found.append(("task_selector", f"tasks.mix[{i}].selector", name, args))
    for i, op in enumerate(config.rollout.experience_pipeline):
        found.append(("operator", f"rollout.experience_pipeline[{i}].name", op.name, op.args))
    replay = config.buffer.replay
    if replay is not None:
        args = replay.priority_fn_args
        found.append(("priority_fn", "buffer.replay.priority_fn", replay.priority_fn, args))
    return found


def buffer_problems(config: RunConfig, registry: Registry) -> list[ConfigProblem]:
    """One problem per unknown name or bad argument, at its config path."""
    problems = []
    for kind, path, name, args in _named(config):
        try:
            registry.validate_args(kind, name, args)
        except ComponentArgsError as exc:
            args_path = path.removesuffix(".name") + (".args" if path.endswith(".name") else "_args")
            problems.append(ConfigProblem(args_path, str(exc)))
        except PluginError as exc:
            problems.append(ConfigProblem(path, str(exc)))
    return problems
