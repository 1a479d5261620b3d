"""The explorer's side of workflows: build the run's workflow and explore a step with it.

``rollout.workflow`` names the workflow (default ``single_turn``). A ``batched`` workflow
(``single_turn``) keeps the explorer's whole-step rollout; any other is run per task by
:class:`~trinity_core.workflows.WorkflowRunner`, its model calls gathered into one batched ``generate``
per turn, and the step's experiences go to the buffer as the workflow made them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from trinity_core import registry
from trinity_core.components.workflow import RewardFn
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.data.rewards import combine_rewards
from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks
from trinity_core.workflows.episodes import EpisodeOutcome

__all__ = ["build_workflow", "explore_episodes", "outcome_metrics", "row_rewards"]


def build_workflow(
    config: ResolvedConfig, policy: Any, tokenizer: Any, max_new_tokens: int, cls: type | None = None
) -> WorkflowRunner | None:
    """The runner of ``rollout.workflow`` (``cls`` given: that class), or None for a batched workflow."""
    rcfg = config.rollout
    if cls is None:
        try:
            cls = registry.resolve("workflow", rcfg.workflow)
        except registry.PluginError as exc:
            raise ConfigError([ConfigProblem("rollout.workflow", str(exc))]) from None
    if getattr(cls, "batched", False):
        return None
    engine = GenerationEngine(
        policy,
        tokenizer,
        {
            "max_new_tokens": max_new_tokens,
            "temperature": rcfg.temperature,
            "top_p": rcfg.top_p,
            "top_k": rcfg.top_k,
            "min_new_tokens": rcfg.min_new_tokens,
            "greedy": False,
        },
    )
    return WorkflowRunner(
        rcfg.workflow, cls, dict(rcfg.workflow_args), engine, max_calls=rcfg.workflow_max_calls
    )


def explore_episodes(
    runner: WorkflowRunner,
    rows: list[dict[str, Any]],
    *,
    step: int,
    task_offset: int,
    repeat_times: int,
    reward_fn: Any,
    model_version: int,
) -> EpisodeOutcome:
    """Run the workflow on every row of the step (``repeat_times`` runs each)."""
    tasks = make_tasks(
        runner.cls,
        rows,
        step=step,
        task_offset=task_offset,
        repeat_times=repeat_times,
        workflow_args=dict(runner.args),
    )
    for task in tasks:
        task.reward_fn = reward_fn(task.raw_task)
    return runner.run(tasks, model_version=model_version)


def row_rewards(
    fields: tuple[str, ...],
    rewards: tuple[list[str], list[Any], list[float]],
    conversational: bool = False,
) -> Callable[[dict[str, Any]], RewardFn]:
    """``row -> reward_fn``: the run's reward functions bound to one task row (``task.reward_fn``);
    ``conversational``: the row's ``prompt_messages`` go to them as TRL's conversational prompts."""
    names, fns, weights = rewards

    def bind(row: dict[str, Any]) -> RewardFn:
        def score(
            completions: list[str], completion_ids: list[tuple[int, ...]], truncated: list[bool]
        ) -> list[float | None]:
            n = len(completions)
            columns: dict[str, list[Any]] = {k: [row[k]] * n for k in fields if k != "prompt"}
            columns["truncated"] = list(truncated)
            prompts = [str(row.get("prompt", ""))] * n
            conversations = [row["prompt_messages"]] * n if conversational else None
            return combine_rewards(
                fns,
                weights,
                names,
                prompts,
                completions,
                columns,
                completion_ids=completion_ids,
                conversations=conversations,
            )

        return score

    return bind


def outcome_metrics(outcome: EpisodeOutcome, started: float) -> dict[str, Tensor]:
    """The step's ``workflow/*`` metrics, episodes per second and the truncated fraction."""
    metrics = {k: torch.tensor(v, dtype=torch.float64) for k, v in outcome.metrics().items()}
    metrics["workflow/episodes_per_second"] = torch.tensor(
        outcome.episodes / max(time.perf_counter() - started, 1e-9), dtype=torch.float64
    )
    exps = outcome.experiences
    metrics["response/truncated"] = torch.tensor(
        sum(e.truncate_status is not None for e in exps) / len(exps) if exps else 0.0, dtype=torch.float64
    )
    return metrics
