"""Running one step's episodes: workflows built per task (or per run), gathered model calls, checks.

Each episode runs concurrently (sync workflows in worker threads, async ones on an event loop), its
model calls going through one :class:`~trinity_core.workflows.queue.GenerateQueue`. An episode that
raises (an environment error, an unparsable action the workflow refuses, too many model calls, bad
experiences) is reported with the workflow, task, run and turn, counted in ``workflow/failed_episodes``
and dropped; training goes on. When every episode of a step fails, :class:`WorkflowError` stops the run.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pydantic

from trinity_core.components.workflow import Workflow, WorkflowTask
from trinity_core.experience import Experience
from trinity_core.registry.args import validation_problems
from trinity_core.workflows.engine import GenerationEngine
from trinity_core.workflows.errors import WorkflowError
from trinity_core.workflows.model import ModelWrapper
from trinity_core.workflows.queue import GenerateQueue

__all__ = ["EpisodeOutcome", "WorkflowRunner", "make_tasks"]

log = logging.getLogger("trinity_core.workflows")


@dataclass
class EpisodeOutcome:
    """The result of one step's episodes."""

    experiences: list[Experience]
    episodes: int
    failures: list[str] = field(default_factory=list)
    generate_calls: int = 0
    turns: list[int] = field(default_factory=list)
    """Model calls of each episode, in episode order."""
    workflow_metrics: dict[str, float] = field(default_factory=dict)
    """The workflow's own metrics of the step (:meth:`Workflow.step_metrics`)."""

    def metrics(self) -> dict[str, float]:
        """``workflow/*`` metrics of the step, and the workflow's own."""
        return {
            "workflow/episodes": float(self.episodes),
            "workflow/failed_episodes": float(len(self.failures)),
            "workflow/generate_calls": float(self.generate_calls),
            "workflow/turns_max": float(max(self.turns, default=0)),
            "workflow/turns_mean": sum(self.turns) / len(self.turns) if self.turns else 0.0,
            **self.workflow_metrics,
        }


def make_tasks(
    cls: type[Workflow],
    rows: Sequence[dict[str, Any]],
    *,
    step: int,
    task_offset: int,
    repeat_times: int,
    **shared: Any,
) -> list[WorkflowTask]:
    """The workflow tasks of a step: one per row (``can_repeat``) or one per (row, run)."""
    if cls.can_repeat:
        return [
            WorkflowTask(row, task_offset + i, step, repeat_times, 0, **shared) for i, row in enumerate(rows)
        ]
    return [
        WorkflowTask(row, task_offset + i, step, 1, run, **shared)
        for i, row in enumerate(rows)
        for run in range(repeat_times)
    ]


class WorkflowRunner:
    """Runs the episodes of workflow ``name`` (class ``cls``, arguments ``args``) on ``engine``.

    Args:
        max_calls: model calls allowed per episode (an endless episode fails at the next one).
    """

    def __init__(
        self,
        name: str,
        cls: type[Workflow],
        args: dict[str, Any],
        engine: GenerationEngine,
        *,
        max_calls: int | None = None,
    ) -> None:
        """Validate ``args`` against the workflow's ``Args`` now, before any episode runs."""
        self.name, self.cls, self.engine, self.max_calls = name, cls, engine, max_calls
        self._pool: ThreadPoolExecutor | None = None
        self._workers = 0
        try:
            validated = cls.validate_args(args)
        except pydantic.ValidationError as exc:  # pydantic reports on several lines; the CLI prints one
            problems = validation_problems(exc, prefix="rollout.workflow_args", model=cls.Args)
            listed = "; ".join(f"{where}: {message}" for where, message in problems)
            raise WorkflowError(f"bad arguments for workflow {name!r}: {listed}") from None
        except Exception as exc:
            raise WorkflowError(
                f"rollout.workflow_args: bad arguments for workflow {name!r}: {exc}"
            ) from None
        self.args = validated.model_dump()
        try:
            cls.check_run(validated, engine.tokenizer)
        except ValueError as exc:
            raise WorkflowError(f"rollout.workflow_args: workflow {name!r} cannot run: {exc}") from None

    def run(self, tasks: Sequence[WorkflowTask], *, model_version: int | None = None) -> EpisodeOutcome:
        """Run every task's episode at once; raise :class:`WorkflowError` when all of them fail."""
        queue = GenerateQueue(self.engine, len(tasks))
        wrappers = [
            ModelWrapper(self.engine, queue=queue, key=k, max_calls=self.max_calls) for k in range(len(tasks))
        ]
        calls_before = self.engine.calls
        loop = asyncio.new_event_loop()
        if self._pool is None or self._workers < len(tasks):
            # Kept between steps, so that what a workflow caches per thread (an environment) lives on.
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._workers = max(1, len(tasks))
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="episode")
        pool = self._pool

        async def episodes() -> list[list[Experience] | tuple[str, BaseException]]:
            pairs = zip(tasks, wrappers, strict=True)
            return await asyncio.gather(*(self._episode(t, w, queue, loop, pool) for t, w in pairs))

        try:
            results = loop.run_until_complete(episodes())
        finally:
            loop.close()
        outcome = EpisodeOutcome([], len(tasks), generate_calls=self.engine.calls - calls_before)
        outcome.turns = [w.turns for w in wrappers]
        first: BaseException | None = None
        for result in results:
            if isinstance(result, tuple):
                outcome.failures.append(result[0])
                first = first or result[1]
            else:
                outcome.experiences += self._stamped(result, model_version)
        if tasks and len(outcome.failures) == len(tasks):
            raise WorkflowError(
                f"every episode of step {tasks[0].batch} failed ({len(tasks)} episodes); first: "
                f"{outcome.failures[0]}; fix the workflow (trinity train --debug shows the traceback)"
            ) from first
        try:
            outcome.workflow_metrics = {
                str(k): float(v) for k, v in self.cls.step_metrics(outcome.experiences).items()
            }
        except Exception as exc:
            raise WorkflowError(
                f"step_metrics of workflow {self.name!r} raised {type(exc).__name__}: {exc}; fix the "
                "workflow (trinity train --debug shows the traceback)"
            ) from exc
        return outcome

    async def _episode(
        self,
        task: WorkflowTask,
        model: ModelWrapper,
        queue: GenerateQueue,
        loop: asyncio.AbstractEventLoop,
        pool: ThreadPoolExecutor,
    ) -> list[Experience] | tuple[str, BaseException]:
        try:
            workflow = self.cls(task=task, model=model, **self.args)
            if self.cls.is_async:
                exps = await workflow.run_async()
            else:
                exps = await loop.run_in_executor(pool, workflow.run)
            return self._checked(exps, task)
        except Exception as exc:
            message = (
                f"workflow {self.name!r} failed on task {task.index} run {task.run_id_base} at turn "
                f"{model.turns}: {type(exc).__name__}: {exc}"
            )
            log.warning("%s; the episode is dropped (counted in workflow/failed_episodes)", message)
            return message, exc
        finally:
            queue.finish()

    def _checked(self, exps: Any, task: WorkflowTask) -> list[Experience]:
        """The episode's experiences with ``eid.batch`` / ``eid.task`` (and ``run``) set, or an error."""
        if not isinstance(exps, list) or not all(isinstance(e, Experience) for e in exps):
            raise WorkflowError(f"run() returned {type(exps).__name__}; return a list of Experience")
        kept: list[Experience] = []
        seen: set[tuple[int, int]] = set()
        for exp in exps:
            if exp.tokens is None:
                raise WorkflowError("run() returned an experience without tokens")
            if exp.reward is None:
                continue  # "not applicable", as for reward functions: no experience
            if not math.isfinite(float(exp.reward)):
                raise WorkflowError(f"run() returned the reward {exp.reward}; rewards must be finite")
            exp.eid.batch, exp.eid.task = task.batch, task.index
            if not self.cls.can_repeat:
                exp.eid.run = task.run_id_base
            ids = (int(exp.eid.run), int(exp.eid.step))
            if ids in seen:
                raise WorkflowError(
                    f"run() returned several experiences with run {ids[0]} and step {ids[1]}; set "
                    "exp.eid.run (one per run) and exp.eid.step (one per turn) so each is distinct"
                )
            seen.add(ids)
            kept.append(exp)
        return kept

    @staticmethod
    def _stamped(exps: list[Experience], model_version: int | None) -> list[Experience]:
        if model_version is not None:
            for exp in exps:
                exp.info["model_version"] = model_version
        return exps
