"""Task sets for ``trinity train``: a plugin kind (``trinity_core.tasks``) and the built-in tasks.

A task set produces rows: dicts with at least ``prompt`` (str) and the fields its reward functions read
(``answer`` for ``exact_match``). Built-in: ``last_digit`` (the embedded default), ``addmod``, ``copy``,
``reverse`` (synthetic, offline) and ``dataset`` (files or a hub id read with ``datasets``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from pydantic import Field

from trinity_core.components.base import Component, ComponentArgs
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig

__all__ = [
    "AddModTask",
    "CopyTask",
    "LastDigitTask",
    "ReverseTask",
    "Task",
    "build_task",
]

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


class _DigitsArgs(ComponentArgs):
    digits: int = Field(1, ge=1, le=6, description="Digits of each operand (operands in [0, 10**digits)).")


class LastDigitTask(Task):
    """Last digit of a+b: prompt ``"7+8="``, answer ``"5"`` (the embedded default task)."""

    Args: ClassVar[type[ComponentArgs]] = _DigitsArgs
    digits: int

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``answer``."""
        return ("prompt", "answer")

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """Operands uniform in ``[0, 10**digits)``."""
        ab = torch.randint(0, 10**self.digits, (n, 2), generator=generator).tolist()
        return [{"prompt": f"{a}+{b}=", "answer": str((a + b) % 10)} for a, b in ab]

    def max_response_tokens(self) -> int:
        """One digit and EOS."""
        return 2


class _AddModArgs(_DigitsArgs):
    modulus: int = Field(7, ge=2, le=10**6, description="The modulus m of (a + b) mod m.")


class AddModTask(Task):
    """(a+b) mod m: prompt ``"7+8%7="``, answer ``"1"``."""

    Args: ClassVar[type[ComponentArgs]] = _AddModArgs
    digits: int
    modulus: int

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``answer``."""
        return ("prompt", "answer")

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """Operands uniform in ``[0, 10**digits)``."""
        ab = torch.randint(0, 10**self.digits, (n, 2), generator=generator).tolist()
        m = self.modulus
        return [{"prompt": f"{a}+{b}%{m}=", "answer": str((a + b) % m)} for a, b in ab]

    def max_response_tokens(self) -> int:
        """The digits of ``modulus - 1`` and EOS."""
        return len(str(self.modulus - 1)) + 1


class _StringArgs(ComponentArgs):
    length: int = Field(3, ge=1, le=32, description="Characters per string.")
    letters: str = Field("abcde", min_length=2, description="Characters the strings are drawn from.")


class CopyTask(Task):
    """Copy a string: prompt ``"cab="``, answer ``"cab"``."""

    Args: ClassVar[type[ComponentArgs]] = _StringArgs
    length: int
    letters: str

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``answer``."""
        return ("prompt", "answer")

    def _strings(self, n: int, generator: torch.Generator) -> list[str]:
        idx = torch.randint(0, len(self.letters), (n, self.length), generator=generator).tolist()
        return ["".join(self.letters[i] for i in row) for row in idx]

    def transform(self, text: str) -> str:
        """The answer for ``text`` (identity)."""
        return text

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """Strings of ``length`` characters uniform over ``letters``."""
        return [{"prompt": f"{s}=", "answer": self.transform(s)} for s in self._strings(n, generator)]

    def alphabet(self) -> str:
        """``letters`` and ``=``."""
        return self.letters + "="

    def max_response_tokens(self) -> int:
        """``length`` characters and EOS."""
        return self.length + 1


class ReverseTask(CopyTask):
    """Reverse a string: prompt ``"cab="``, answer ``"bac"``."""

    def transform(self, text: str) -> str:
        """``text`` reversed."""
        return text[::-1]


def build_task(config: ResolvedConfig) -> Task:
    """The task set named in ``tasks.name`` (default ``last_digit``), built with ``tasks.args``."""
    from trinity_core import registry

    name = config.tasks.name or "last_digit"
    try:
        task = registry.create("task", name, config.tasks.args)
    except registry.ComponentArgsError as exc:
        raise ConfigError([ConfigProblem("tasks.args", str(exc))]) from None
    except registry.PluginError as exc:
        raise ConfigError([ConfigProblem("tasks.name", str(exc))]) from None
    except ValueError as exc:  # TaskDataError and friends
        raise ConfigError([ConfigProblem("tasks", str(exc))]) from None
    return task  # type: ignore[no-any-return]
