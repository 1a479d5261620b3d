"""Building a run's task sets and their selectors from ``tasks`` (see :mod:`.selection`), with every
problem a :class:`~trinity_core.config.ConfigError` at its config path."""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.config.buffer_config import TaskSetEntry
from trinity_core.config.models import TasksConfig
from trinity_core.train.data.dataset_io import TaskDataError
from trinity_core.train.data.selection import Member, SelectedTasks, weight_at
from trinity_core.train.data.task_base import Task

__all__ = ["POOL_SEED_OFFSET", "build_selected_tasks", "needs_selection"]

POOL_SEED_OFFSET = 2_000_029
"""A pool of ``pool_size`` rows is drawn with ``seed * POOL_SEED_OFFSET + task set index`` (the same pool
on every rank, apart from the training and held-out streams)."""


def needs_selection(tasks: TasksConfig) -> bool:
    """Whether the run reads its tasks through selectors (a mixture, a pool, or another selector)."""
    return (
        tasks.mix is not None
        or tasks.selector != "shuffle"
        or bool(tasks.selector_args)
        or tasks.pool_size is not None
    )


def _entries(tasks: TasksConfig) -> list[tuple[str, TaskSetEntry]]:
    """``(config path, entry)`` of every task set: the mixture's, or the one of ``name``/``args``."""
    if tasks.mix is None:
        single = TaskSetEntry(name=tasks.name or "last_digit", args=tasks.args, pool_size=tasks.pool_size)
        return [("tasks", single)]
    problems = []
    if tasks.name is not None or tasks.args:
        problems.append(
            ConfigProblem("tasks.mix", "set either tasks.name/args (one task set) or tasks.mix (several)")
        )
    if tasks.pool_size is not None:
        problems.append(ConfigProblem("tasks.pool_size", "with tasks.mix, set pool_size per task set"))
    if not tasks.mix:
        problems.append(ConfigProblem("tasks.mix", "an empty mixture", hint="list at least one task set"))
    if problems:
        raise ConfigError(problems)
    return [(f"tasks.mix[{i}]", entry) for i, entry in enumerate(tasks.mix)]


def _check_weights(entries: list[tuple[str, TaskSetEntry]]) -> None:
    """The weights must sum to a positive number at every step (checked at every schedule point)."""
    points = {0} | {s for _, e in entries if not isinstance(e.weight, float | int) for s, _ in e.weight}
    for step in sorted(points):
        total = sum(weight_at(e.weight, step) for _, e in entries)
        if not total > 0:
            weights = {path: weight_at(e.weight, step) for path, e in entries}
            raise ConfigError(
                [
                    ConfigProblem(
                        "tasks.mix",
                        f"the task sets' weights sum to {total} at step {step} ({weights})",
                        hint="give at least one task set a weight > 0 at every step",
                    )
                ]
            )


def _task(path: str, entry: TaskSetEntry) -> Task:
    from trinity_core import registry

    try:
        task = registry.create("task", entry.name, entry.args)
    except registry.ComponentArgsError as exc:
        raise ConfigError([ConfigProblem(f"{path}.args", str(exc))]) from None
    except registry.PluginError as exc:
        raise ConfigError([ConfigProblem(f"{path}.name", str(exc))]) from None
    except ValueError as exc:  # TaskDataError and friends
        raise ConfigError([ConfigProblem(path, str(exc))]) from None
    return task  # type: ignore[no-any-return]


def _member(path: str, index: int, entry: TaskSetEntry, tasks: TasksConfig, seed: int) -> Member:
    """One task set with its pool and selector."""
    task = _task(path, entry)
    label = entry.label or entry.name
    selector_name = entry.selector or tasks.selector
    selector_args = entry.selector_args if entry.selector_args is not None else tasks.selector_args
    indexed = callable(getattr(task, "num_rows", None))
    member = Member(label, task, entry.weight, eval=entry.eval)
    if entry.pool_size is not None:
        if indexed:
            raise ConfigError(
                [
                    ConfigProblem(
                        f"{path}.pool_size", f"task set {entry.name!r} has rows of its own; remove pool_size"
                    )
                ]
            )
        member.pool = task.sample(
            entry.pool_size, torch.Generator().manual_seed(seed * POOL_SEED_OFFSET + index)
        )
    elif not indexed:
        if selector_name == "shuffle" and not selector_args:
            return member  # fresh rows every step, as the task set always drew them
        raise ConfigError(
            [
                ConfigProblem(
                    f"{path}.pool_size",
                    f"task selector {selector_name!r} chooses among a task set's rows, and task set "
                    f"{entry.name!r} draws fresh rows every step",
                    hint=f"set {path}.pool_size: N to draw N rows once and select among them",
                )
            ]
        )
    if member.size < 1:
        raise ConfigError([ConfigProblem(path, f"task set {entry.name!r} has no rows; give it at least one")])
    member.selector, member.selector_label = _selector(path, member, selector_name, selector_args)
    return member


def _selector(path: str, member: Member, name: str, args: dict[str, Any]) -> tuple[Any, str]:
    """The task set's selector, built with the columns it reads."""
    from trinity_core import registry

    where = f"{path}.selector" if path != "tasks" else "tasks.selector"
    try:
        record = registry.record("task_selector", name)
        label = f"task selector {name!r} ({record.entry_point.provider})"
        selector = registry.create("task_selector", name, args, size=member.size)
        wanted = selector.required_columns()
        if wanted:
            columns = {key: _numbers(member, key) for key in wanted}
            selector = registry.create("task_selector", name, args, size=member.size, columns=columns)
    except registry.ComponentArgsError as exc:
        raise ConfigError([ConfigProblem(f"{where}_args", str(exc))]) from None
    except registry.PluginError as exc:
        raise ConfigError([ConfigProblem(where, str(exc))]) from None
    except (TaskDataError, ValueError) as exc:
        raise ConfigError([ConfigProblem(where, f"task selector {name!r}: {exc}")]) from None
    return selector, label


def _numbers(member: Member, key: str) -> torch.Tensor:
    values = member.column(key)
    try:
        return torch.tensor([float(v) for v in values], dtype=torch.float64)
    except (TypeError, ValueError):
        raise TaskDataError(f"column {key!r} of task set {member.label!r} must hold numbers") from None


def build_selected_tasks(config: ResolvedConfig) -> SelectedTasks:
    """The run's task sets, their pools and selectors, as one :class:`SelectedTasks`."""
    tasks = config.tasks
    entries = _entries(tasks)
    _check_weights(entries)
    members = [_member(path, i, e, tasks, config.trainer.seed) for i, (path, e) in enumerate(entries)]
    labels = [m.label for m in members]
    if len(set(labels)) < len(labels):
        raise ConfigError(
            [
                ConfigProblem(
                    "tasks.mix", f"two task sets share a label in {labels}", hint="set label per task set"
                )
            ]
        )
    if not any(m.eval for m in members):
        raise ConfigError(
            [ConfigProblem("tasks.mix", "no task set is evaluated", hint="set eval: true on one")]
        )
    if len({m.task.conversational for m in members}) > 1:
        raise ConfigError(
            [
                ConfigProblem(
                    "tasks.mix", "some task sets give conversations, others plain prompts; mix one kind"
                )
            ]
        )
    defaults = {tuple(m.task.default_reward_fns) for m in members}
    if len(defaults) > 1 and not tasks.reward_fns:
        raise ConfigError(
            [
                ConfigProblem(
                    "tasks.reward_fns",
                    f"the task sets default to different reward functions {sorted(defaults)}",
                    hint="name the mixture's reward functions in tasks.reward_fns",
                )
            ]
        )
    return SelectedTasks(members, next(iter(defaults)))
