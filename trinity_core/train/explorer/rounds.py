"""More rounds for a step whose operators kept too little (DAPO's dynamic sampling), and the metrics of
what a step keeps.

When an operator of ``rollout.experience_pipeline`` declares ``max_extra_rounds = k`` and the step's first
round leaves fewer task groups than the rank's prompts, the explorer samples another round of prompts
(new EID tasks: round ``r`` numbers its prompts from ``r * rollout.prompts_per_step``), runs the operators
on it, and so on, up to ``k`` extra rounds; the first ``prompts`` groups kept are the step's. A step that
keeps nothing is an error naming the operator that dropped the last rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from trinity_core.batch import LazyExperiences
from trinity_core.batch_rows import concat_batches
from trinity_core.components import Metrics
from trinity_core.experience import Experience
from trinity_core.registry import PluginContractError
from trinity_core.train.explorer.operators import as_batch, zero_variance_share
from trinity_core.train.explorer.pipeline import ExperiencePipeline, Operated

if TYPE_CHECKING:
    from trinity_core.train.explorer.explorer import Explored, Explorer

__all__ = ["keep_unfiltered", "kept_metrics", "reward_matrix", "task_groups", "top_up"]


def task_groups(experiences: Sequence[Experience]) -> int:
    """Task groups among ``experiences`` (read from the batch's columns when they were never made)."""
    if isinstance(experiences, LazyExperiences) and experiences.batch is not None:
        batch = experiences.batch
        if "task" in getattr(batch, "group_index", {}):
            return int(batch.num_groups["task"])
    return len({exp.eid.tid for exp in experiences})


def reward_matrix(explored: Explored, prompts: int, group_size: int) -> Tensor:
    """The round's rewards as ``(prompts, G)`` float64, NaN where none was given; a workflow's
    experiences are placed by their EID task (and padded with NaN to the longest row)."""
    if explored.experiences is None:
        values = [math.nan if r is None else float(r) for r in explored.rewards]
        return torch.tensor(values, dtype=torch.float64).reshape(prompts, group_size)
    per_row: list[list[float]] = [[] for _ in range(prompts)]
    for exp in explored.experiences:
        offset = explored.task_offset or 0
        row = int(exp.eid.task) - offset if isinstance(exp.eid.task, int) else -1
        if 0 <= row < prompts:
            per_row[row].append(math.nan if exp.reward is None else float(exp.reward))
    width = max((len(r) for r in per_row), default=0)
    padded = [r + [math.nan] * (width - len(r)) for r in per_row]
    return torch.tensor(padded, dtype=torch.float64).reshape(prompts, width)


def _mean_metrics(rounds: list[Metrics]) -> Metrics:
    """Each metric averaged over the rounds that report it."""
    keys = dict.fromkeys(k for metrics in rounds for k in metrics)
    out: Metrics = {}
    for key in keys:
        values = [torch.as_tensor(m[key], dtype=torch.float64) for m in rounds if key in m]
        out[key] = torch.stack(values).mean()
    return out


def top_up(explorer: Explorer, step: int, first: Explored, operated: Operated) -> Operated:
    """Sample more rounds until the operators keep the rank's prompts in task groups, or the operators'
    ``max_extra_rounds`` are spent; the first ``prompts`` groups kept are the step's."""
    pipeline, target = explorer.pipeline, explorer.prompts_per_rank
    pieces, groups = [operated], task_groups(operated.experiences)
    round_metrics, rewards = [dict(first.metrics)], list(first.rewards)
    extra = 0
    while groups < target and extra < pipeline.max_extra_rounds:
        extra += 1
        more = explorer.sample_round(step, extra)
        rewards.extend(more.rewards)
        piece = pipeline.operate(explorer.experiences(more), step)
        pieces.append(piece)
        round_metrics.append(dict(more.metrics))
        groups += task_groups(piece.experiences)
    first.all_rewards = rewards
    first.metrics.update(_mean_metrics(round_metrics))
    metrics = _mean_metrics([p.metrics for p in pieces])
    metrics["buffer/extra_rounds"] = torch.tensor(float(extra), dtype=torch.float64)
    metrics["buffer/prompts_sampled"] = torch.tensor(float((extra + 1) * target), dtype=torch.float64)
    kept = [as_batch(p.experiences, pipeline.pad_token_id) for p in pieces if len(p.experiences)]
    rows_in = sum(p.rows_in for p in pieces)
    if not kept:
        emptied = next((p.emptied_by for p in reversed(pieces) if p.emptied_by), None)
        return Operated(pieces[-1].experiences, metrics, emptied, rows_in)
    batch = concat_batches(kept)
    if batch.num_groups["task"] > target:
        batch = batch.select(batch.group_index["task"] < target)
    return Operated(batch.experiences, metrics, rows_in=rows_in)


def keep_unfiltered(explorer: Explorer, step: int, first: Explored, operated: Operated) -> Operated:
    """When an operator with ``when_empty = "keep"`` left nothing of the step, the first round's
    experiences without that operator (metric ``buffer/unfiltered_steps`` 1); else ``operated``."""
    stage = operated.emptied_by
    if len(operated.experiences) or stage is None or stage.operator.when_empty != "keep":
        if explorer.pipeline.operators:
            operated.metrics["buffer/unfiltered_steps"] = torch.zeros((), dtype=torch.float64)
        return operated
    kept = explorer.pipeline.operate(explorer.experiences(first), step, bypass=frozenset({stage.label}))
    kept.metrics = {**operated.metrics, **kept.metrics}
    kept.metrics["buffer/unfiltered_steps"] = torch.ones((), dtype=torch.float64)
    kept.rows_in = operated.rows_in
    return kept


def kept_metrics(pipeline: ExperiencePipeline, operated: Operated, step: int) -> Metrics:
    """``buffer/groups`` (task groups written), ``buffer/zero_variance_groups`` (the share of them without
    group-relative signal) and, with operators, ``buffer/filtered_fraction``; raises when an operator
    left nothing of the step."""
    exps = operated.experiences
    if len(exps) == 0 and operated.emptied_by is not None:
        rounds = 1 + pipeline.max_extra_rounds
        raise PluginContractError(
            f"step {step}: {operated.emptied_by.describe} left no experience of the step's {rounds} "
            "round(s) of prompts; check that the rewards vary within a task group, raise the operator's "
            "max_extra_rounds, set its when_empty: keep, or remove it from rollout.experience_pipeline"
        )
    metrics: Metrics = {"buffer/groups": torch.tensor(float(task_groups(exps)), dtype=torch.float64)}
    if pipeline.operators:
        dropped = 1.0 - len(exps) / operated.rows_in if operated.rows_in else 0.0
        metrics["buffer/filtered_fraction"] = torch.tensor(dropped, dtype=torch.float64)
    if isinstance(exps, LazyExperiences) and exps.batch is not None:
        metrics["buffer/zero_variance_groups"] = zero_variance_share(exps.batch)
    elif len(exps):
        by_group: dict[str, set[float | None]] = {}
        for exp in exps:
            by_group.setdefault(exp.eid.tid, set()).add(exp.reward)
        flat = sum(len(values) == 1 for values in by_group.values())
        metrics["buffer/zero_variance_groups"] = torch.tensor(flat / len(by_group), dtype=torch.float64)
    else:
        metrics["buffer/zero_variance_groups"] = torch.zeros((), dtype=torch.float64)
    return metrics
