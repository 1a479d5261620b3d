"""The task set contract (kind ``task``): :class:`Task`, and what one step draws from it (:class:`TaskDraw`).

A task set produces rows: dicts with at least ``prompt`` (str) and the fields its reward functions read.
The explorer draws a step's rows with :meth:`Task.draw` and reports how they went with
:meth:`Task.feedback`; a plain task set samples fresh rows and ignores the feedback, a task set read
through task selectors (:mod:`trinity_core.train.data.selection`) passes both on to its selectors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from trinity_core.components.base import Component

__all__ = ["EVAL_SEED_OFFSET", "Pick", "Task", "TaskDraw"]


@dataclass(frozen=True)
class Pick:
    """A block of consecutive rows of a draw that came from one task set of the run.

    Attributes:
        member: which task set (its position in ``tasks.mix``; 0 for a single one).
        count: how many rows.
        indices: their row numbers in that task set, ``(count,)`` int64; None for a task set that
            draws fresh rows (nothing to select among, no feedback).
    """

    member: int
    count: int
    indices: Tensor | None = None


@dataclass
class TaskDraw:
    """The rows of one draw, and which task set rows they are (``picks`` in row order)."""

    rows: list[dict[str, Any]]
    picks: list[Pick] = field(default_factory=list)


EVAL_SEED_OFFSET = 1_000_003
"""Held-out rows are drawn with ``seed + EVAL_SEED_OFFSET`` (a generator separate from training)."""


class Task(Component, ABC):
    """Base of task sets (kind ``task``).

    Implement :meth:`sample` (training rows) and :attr:`fields`; override :meth:`eval_rows`,
    :meth:`alphabet` and :meth:`max_response_tokens` when the defaults do not fit.
    """

    kind: ClassVar[str] = "task"
    default_reward_fns: ClassVar[tuple[str, ...]] = ("exact_match",)
    """Reward functions used when the config names none."""

    @property
    @abstractmethod
    def fields(self) -> tuple[str, ...]:
        """Names of the fields every row has (``prompt`` first)."""

    @abstractmethod
    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """``n`` training rows drawn with ``generator``."""

    @property
    def conversational(self) -> bool:
        """Whether the prompts are conversations (rows carry ``prompt_messages`` given as data): reward
        functions then get TRL's conversational form (see :mod:`trinity_core.train.data.rewards`)."""
        return False

    def eval_rows(self, n: int, seed: int) -> list[dict[str, Any]]:
        """``n`` held-out rows for the greedy evaluation (default: a sample from a separate generator)."""
        return self.sample(n, torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET))

    def alphabet(self) -> str:
        """Every character a prompt or answer can contain (for the character-level tokenizer)."""
        return "0123456789+=%"

    def max_response_tokens(self) -> int:
        """A response budget that fits every answer plus EOS (the default ``rollout.max_new_tokens``)."""
        return 8

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue reading where this one stopped (JSON-friendly).

        Synthetic tasks draw everything from the trainer's generator, which the checkpoint already
        holds: nothing (the default). A task with a position, such as :class:`DatasetTask`, returns it.
        """
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from what :meth:`state_dict` returned (default: nothing to restore)."""

    def draw(self, n: int, generator: torch.Generator, step: int) -> TaskDraw:
        """The ``n`` rows of explore step ``step`` (default: :meth:`sample`, no picks)."""
        return TaskDraw(self.sample(n, generator))

    def feedback(self, draw: TaskDraw, rewards: Tensor) -> dict[str, Tensor]:
        """How a draw went: ``rewards`` ``(n, G)`` float64, the rewards of each row's ``G`` responses
        (NaN: unscored). Returns metrics; default: none (a plain task set learns nothing from it)."""
        return {}
