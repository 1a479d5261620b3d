"""The learner's side of experience replay (``buffer.replay``): a step's fresh batch, with stored task
groups drawn from the replay buffer (:mod:`trinity_core.buffer.replay`), and the fresh groups stored.

Fresh rows come first, replayed rows after them (each keeps its advantages and its policy version), in
one batch that goes on to balancing and the passes as a fresh batch would. Nothing is rebuilt on a step
that replays nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch
from trinity_core.buffer.replay import ReplayBuffer
from trinity_core.components import Metrics
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.learner.staleness import row_versions

__all__ = ["build_replay", "mix_replay"]


def build_replay(config: ResolvedConfig) -> ReplayBuffer | None:
    """The run's replay buffer (modes ``both`` and ``async`` with ``buffer.replay``), or None."""
    from trinity_core import registry

    settings = config.buffer.replay
    if settings is None:
        return None
    if config.mode not in ("both", "async"):
        raise ConfigError(
            [
                ConfigProblem(
                    "buffer.replay",
                    f"replay mixes stored groups into the batches of modes both and async; this run is mode "
                    f"{config.mode}",
                    hint="remove buffer.replay",
                )
            ]
        )
    name = settings.priority_fn
    try:
        record = registry.record("priority_fn", name)
        priority = registry.create("priority_fn", name, settings.priority_fn_args)
    except registry.ComponentArgsError as exc:
        raise ConfigError([ConfigProblem("buffer.replay.priority_fn_args", str(exc))]) from None
    except registry.PluginError as exc:
        raise ConfigError([ConfigProblem("buffer.replay.priority_fn", str(exc))]) from None
    return ReplayBuffer(
        priority,
        groups_per_step=settings.groups_per_step,
        capacity=settings.capacity,
        max_reuse=settings.max_reuse,
        max_staleness=settings.max_staleness,
        label=f"priority function {name!r} ({record.entry_point.provider})",
    )


def _groups(batch: ExperienceBatch, version: int) -> tuple[list[list[Any]], list[int]]:
    """The batch's experiences per task group (first-appearance order) and each group's newest version."""
    index = batch.group_index["task"].tolist()
    versions = row_versions(batch, version).tolist()
    groups: list[list[Any]] = [[] for _ in range(batch.num_groups["task"])]
    newest = [-1] * len(groups)
    for exp, g, v in zip(batch.experiences, index, versions, strict=True):
        groups[g].append(exp)
        newest[g] = max(newest[g], int(v))
    return groups, newest


def mix_replay(replay: ReplayBuffer, batch: ExperienceBatch, version: int) -> tuple[ExperienceBatch, Metrics]:
    """``batch`` with the replayed groups appended, the fresh groups stored; metrics ``buffer/replay/*``.

    ``batch`` must carry the ``task`` group level (the learner reads it so when replay is on).
    """
    drawn, metrics = replay.draw(version)
    groups, versions = _groups(batch, version)
    metrics.update(replay.add(groups, versions, version))
    metrics["buffer/replay/fresh_rows"] = torch.tensor(float(len(batch)), dtype=torch.float64)
    if not drawn:
        return batch, metrics
    levels = [level for level in GROUP_LEVELS if level in batch.group_index]
    mixed = ExperienceBatch.from_experiences(
        [*batch.experiences, *drawn], pad_token_id=batch.pad_token_id, group_levels=levels
    )
    return mixed, metrics
