"""Workflows: the unit that turns a task into experiences (single-turn prompts, multi-turn agents).

* :class:`~trinity_core.components.Workflow` / :class:`~trinity_core.components.WorkflowTask`: the
  contract (kind ``workflow``, entry points ``trinity_core.workflows``), in Trinity-RFT's shape;
* :class:`ModelWrapper`: ``generate`` / ``chat`` / ``generate_tokens``, sync and async, whose calls from
  concurrent episodes :class:`GenerateQueue` gathers into one batched ``generate`` per turn;
* :class:`Conversation`: a multi-turn episode as tokens, as one ``multi_turn`` experience or one
  experience per turn (``eid.step``);
* :class:`WorkflowRunner`: a step's episodes, failures reported and counted;
* :class:`SingleTurnWorkflow`: ``single_turn``, the default (today's rollout).

See docs/workflows.md.
"""

from __future__ import annotations

from trinity_core.components.workflow import ChatModel, Workflow, WorkflowTask
from trinity_core.workflows.conversation import Conversation
from trinity_core.workflows.engine import GenerationEngine, Request
from trinity_core.workflows.episodes import EpisodeOutcome, WorkflowRunner, make_tasks
from trinity_core.workflows.errors import WorkflowError
from trinity_core.workflows.model import ModelWrapper, TurnLimitError, render_messages
from trinity_core.workflows.queue import GenerateQueue
from trinity_core.workflows.single_turn import SingleTurnWorkflow

__all__ = [
    "ChatModel",
    "Conversation",
    "EpisodeOutcome",
    "GenerateQueue",
    "GenerationEngine",
    "ModelWrapper",
    "Request",
    "SingleTurnWorkflow",
    "TurnLimitError",
    "Workflow",
    "WorkflowError",
    "WorkflowRunner",
    "WorkflowTask",
    "make_tasks",
    "render_messages",
]
