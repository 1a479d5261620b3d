"""Task sets for ``trinity train``: a plugin kind (``trinity_core.tasks``) and the built-in tasks.

A task set produces rows: dicts with at least ``prompt`` (str) and the fields its reward functions read
(``answer`` for ``exact_match``). Built-in: ``last_digit`` (the embedded default), ``addmod``, ``copy``,
``reverse`` (synthetic, offline) and ``dataset`` (files or a hub id read with ``datasets``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field

from trinity_core.components.base import ComponentArgs
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.data.task_base import EVAL_SEED_OFFSET, Pick, Task, TaskDraw

__all__ = [
    "EVAL_SEED_OFFSET",
    "AddModTask",
    "CopyTask",
    "LastDigitTask",
    "Pick",
    "ReverseTask",
    "Task",
    "TaskDraw",
    "build_task",
]


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
    """The run's task set: the one named in ``tasks.name`` (default ``last_digit``), built with
    ``tasks.args``; read through task selectors when ``tasks`` asks for a mixture, a pool or a selector
    other than ``shuffle`` (:mod:`~trinity_core.train.data.selection`)."""
    from trinity_core import registry
    from trinity_core.train.data.task_mix import build_selected_tasks, needs_selection

    if needs_selection(config.tasks):
        return build_selected_tasks(config)
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
