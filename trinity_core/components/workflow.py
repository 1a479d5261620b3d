"""The workflow contract (kind ``workflow``, namespace ``trinity_core.workflows``).

A workflow turns one task into experiences, in Trinity-RFT's shape, so that a Trinity-RFT workflow ports
by changing its imports::

    class MyWorkflow(Workflow):
        def run(self) -> list[Experience]:
            exps = self.model.chat([{"role": "user", "content": self.task.raw_task["prompt"]}], n=1)
            for exp in exps:
                exp.reward = score(exp.response_text)
            return exps

The explorer builds one workflow per task (``can_repeat``: it makes all ``task.repeat_times`` runs
itself) or one per run, calls :meth:`Workflow.run_async` for many of them at once, and gathers their
model calls into one batched ``generate`` per turn. It sets ``eid.batch`` (the step) and ``eid.task``
(the global task index) of every returned experience, and ``eid.run`` too when the workflow makes one
run; a workflow sets ``eid.step`` (its turn) when it returns one experience per turn, and ``eid.run``
when it makes several runs.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from trinity_core.components.base import Component, ComponentArgs
from trinity_core.experience import Experience

__all__ = ["ChatModel", "Workflow", "WorkflowTask"]


class ChatModel(Protocol):
    """What a workflow's ``model`` offers (:class:`trinity_core.workflows.ModelWrapper` implements it).

    Every call returns one single-turn :class:`Experience` per response (prompt-major, ``n`` per
    prompt) with ``tokens``, ``prompt_length``, ``logprobs``, ``response_text`` and ``truncate_status``.
    """

    @property
    def tokenizer(self) -> Any:
        """The policy's tokenizer."""
        ...

    def encode(self, text: str, *, bos: bool = False) -> list[int]:
        """Token ids of ``text`` (``bos``: encoded as a prompt, ``<bos>`` first)."""
        ...

    def generate(self, prompts: Sequence[str], n: int = 1, **sampling: Any) -> list[Experience]:
        """``n`` responses to each text prompt."""
        ...

    def chat(self, messages: Sequence[Mapping[str, Any]], n: int = 1, **sampling: Any) -> list[Experience]:
        """``n`` responses to one conversation."""
        ...

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], n: int = 1, **sampling: Any
    ) -> list[Experience]:
        """``n`` responses to each already encoded prompt (token ids)."""
        ...

    async def generate_async(self, prompts: Sequence[str], n: int = 1, **sampling: Any) -> list[Experience]:
        """:meth:`generate` for ``run_async``."""
        ...

    async def chat_async(
        self, messages: Sequence[Mapping[str, Any]], n: int = 1, **sampling: Any
    ) -> list[Experience]:
        """:meth:`chat` for ``run_async``."""
        ...

    async def generate_tokens_async(
        self, prompts: Sequence[Sequence[int]], n: int = 1, **sampling: Any
    ) -> list[Experience]:
        """:meth:`generate_tokens` for ``run_async``."""
        ...


RewardFn = Callable[[list[str], list[tuple[int, ...]], list[bool]], list[float | None]]
"""``reward_fn(completions, completion_ids, truncated)``: the run's reward functions bound to a task row."""


@dataclass
class WorkflowTask:
    """One task as a workflow sees it (Trinity-RFT's ``Task``, the fields trinity-core has).

    Attributes:
        raw_task: the task row (a dataset row, or an environment seed with its prompt).
        index: the global task index (``eid.task``).
        batch: the training step (``eid.batch``).
        repeat_times: runs this workflow instance makes (``algorithm.repeat_times`` when the workflow
            ``can_repeat``, else 1).
        run_id_base: the run index of this instance's first run.
        reward_fn: the run's reward functions bound to this row (None: the workflow rewards itself).
        rollout_args: sampling settings of the run (``temperature``, ``max_new_tokens``, ...).
        workflow_args: the ``rollout.workflow_args`` of the run.
    """

    raw_task: dict[str, Any]
    index: int = 0
    batch: int = 0
    repeat_times: int = 1
    run_id_base: int = 0
    reward_fn: RewardFn | None = None
    rollout_args: dict[str, Any] = field(default_factory=dict)
    workflow_args: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """``raw_task["prompt"]``."""
        return str(self.raw_task["prompt"])


class Workflow(Component):
    """Base of workflows: ``Workflow(task=..., model=..., **args)``, then ``run()`` or ``run_async()``.

    Class attributes:
        can_repeat: one instance makes all ``task.repeat_times`` runs (and sets ``eid.run`` on its
            experiences); otherwise the explorer builds one instance per run.
        is_async: the explorer awaits :meth:`run_async` on its event loop (the workflow must use the
            ``*_async`` model calls); otherwise :meth:`run` runs in a worker thread.
        batched: the workflow has a whole-step fast path the explorer uses instead of one instance per
            task (``single_turn``); its per-task :meth:`run` must give the same experiences.
    """

    kind: ClassVar[str] = "workflow"
    can_repeat: ClassVar[bool] = False
    is_async: ClassVar[bool] = False
    batched: ClassVar[bool] = False
    conformance_task: ClassVar[dict[str, Any] | None] = None
    """A task row the conformance kit runs the workflow on (None: ``{"prompt": "1+2="}``)."""

    def __init__(
        self, *, task: WorkflowTask, model: ChatModel, auxiliary_models: Sequence[Any] = (), **args: Any
    ) -> None:
        """Store ``task``, ``model`` and the validated ``args`` (the class's ``Args`` fields)."""
        super().__init__(**args)
        self.task, self.model, self.auxiliary_models = task, model, list(auxiliary_models)

    @classmethod
    def check_run(cls, args: ComponentArgs, tokenizer: Any) -> None:
        """Refuse a run this workflow cannot play, once, before any episode (default: accept it).

        Called by the explorer with the validated ``rollout.workflow_args`` and the policy's tokenizer,
        for what ``Args`` validation cannot see (names to import, the tokenizer's chat template). Raise
        ``ValueError`` saying what is wrong and what to do; ``trinity train`` prints it as one line and
        exits 1 before the first step.
        """

    @classmethod
    def step_metrics(cls, experiences: Sequence[Experience]) -> dict[str, float]:
        """The workflow's own metrics of one step, from the experiences its episodes returned (default:
        none). They go to ``metrics.jsonl`` and the trackers beside ``workflow/*``; name them
        ``<topic>/<metric>`` (``tools/calls_per_episode``). Called once per step in the explorer."""
        return {}

    @property
    def repeatable(self) -> bool:
        """Trinity-RFT's name of :attr:`can_repeat`."""
        return self.can_repeat

    @abstractmethod
    def run(self) -> list[Experience]:
        """The experiences of this task (``task.repeat_times`` runs when ``can_repeat``)."""

    async def run_async(self) -> list[Experience]:
        """:meth:`run` in a worker thread (override, with ``is_async = True``, for a native coroutine)."""
        return await asyncio.to_thread(self.run)
