"""Task sets for ``trinity train``: a plugin kind (``trinity_core.tasks``) and the built-in tasks.

A task set produces rows: dicts with at least ``prompt`` (str) and the fields its reward functions read
(``answer`` for ``exact_match``). Built-in: ``last_digit`` (the embedded default), ``addmod``, ``copy``,
``reverse`` (synthetic, offline) and ``dataset`` (a Hugging Face ``datasets`` dataset saved on disk).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from pydantic import Field

from trinity_core.components.base import Component, ComponentArgs

__all__ = [
    "AddModTask",
    "CopyTask",
    "DatasetTask",
    "LastDigitTask",
    "ReverseTask",
    "Task",
    "TaskDataError",
]

EVAL_SEED_OFFSET = 1_000_003
"""Held-out rows are drawn with ``seed + EVAL_SEED_OFFSET`` (a generator separate from training)."""


class TaskDataError(ValueError):
    """A task's data is unusable (missing file, missing fields, empty)."""


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

    def eval_rows(self, n: int, seed: int) -> list[dict[str, Any]]:
        """``n`` held-out rows for the greedy evaluation (default: a sample from a separate generator)."""
        return self.sample(n, torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET))

    def alphabet(self) -> str:
        """Every character a prompt or answer can contain (for the character-level tokenizer)."""
        return "0123456789+=%"

    def max_response_tokens(self) -> int:
        """A response budget that fits every answer plus EOS (the default ``rollout.max_new_tokens``)."""
        return 8


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


class _DatasetArgs(ComponentArgs):
    path: str = Field(
        "", description="Directory written by datasets' save_to_disk (a Dataset or DatasetDict)."
    )
    split: str = Field("train", description="Split to train on when the directory holds a DatasetDict.")
    eval_split: str | None = Field(
        None, description="Split for the held-out evaluation; None: the last eval rows of the train split."
    )
    prompt_field: str = Field("prompt", description="Column holding the prompt text.")


class DatasetTask(Task):
    """Rows of a ``datasets`` dataset saved on disk; the prompt column is renamed ``prompt``."""

    Args: ClassVar[type[ComponentArgs]] = _DatasetArgs
    path: str
    split: str
    eval_split: str | None
    prompt_field: str

    def __init__(self, **args: Any) -> None:
        """Load the dataset; a missing directory, split or prompt column is a :class:`TaskDataError`."""
        super().__init__(**args)
        self._train = self._load(self.split)
        self._eval = self._load(self.eval_split) if self.eval_split else None

    def _load(self, split: str) -> list[dict[str, Any]]:
        import datasets

        if not self.path:
            raise TaskDataError("tasks.args.path: the dataset task needs path=<directory from save_to_disk>")
        try:
            data: Any = datasets.load_from_disk(self.path)
        except IndexError:  # what `datasets` raises for a dataset saved with no rows (no shards)
            raise TaskDataError(
                f"tasks.args.path: dataset {self.path!r} is empty; give it at least one row"
            ) from None
        except (FileNotFoundError, ValueError) as exc:
            raise TaskDataError(
                f"tasks.args.path: cannot load a dataset from {self.path!r} ({exc}); write it with "
                "Dataset.save_to_disk(path)"
            ) from None
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise TaskDataError(
                    f"tasks.args.split: {self.path!r} has no split {split!r}; splits: {sorted(data)}"
                )
            data = data[split]
        if self.prompt_field not in data.column_names:
            raise TaskDataError(
                f"tasks.args.prompt_field: dataset {self.path!r} has no column {self.prompt_field!r}; "
                f"columns: {data.column_names}"
            )
        if len(data) == 0:
            raise TaskDataError(f"tasks.args.path: dataset {self.path!r} split {split!r} is empty")
        rows: list[dict[str, Any]] = data.to_list()
        for index, row in enumerate(rows):
            prompt = row.pop(self.prompt_field)
            # str() would turn None into "None" and [1, 2] into "[1, 2]": train on text only.
            if not isinstance(prompt, str) or not prompt:
                raise TaskDataError(
                    f"tasks.args.prompt_field: row {index} of dataset {self.path!r} split {split!r} has "
                    f"{self.prompt_field} = {prompt!r:.40} ({type(prompt).__name__}); every prompt must be a "
                    "non-empty string: fix or drop the row"
                )
            row["prompt"] = prompt
        return rows

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt`` and every other column of the dataset."""
        return ("prompt", *(k for k in self._train[0] if k != "prompt"))

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """Rows drawn uniformly with replacement."""
        idx = torch.randint(0, len(self._train), (n,), generator=generator).tolist()
        return [dict(self._train[i]) for i in idx]

    def eval_rows(self, n: int, seed: int) -> list[dict[str, Any]]:
        """The first ``n`` rows of ``eval_split``, else the last ``n`` rows of the train split."""
        source = self._eval if self._eval is not None else self._train[-n:]
        return [dict(r) for r in source[:n]]

    def alphabet(self) -> str:
        """Every character of every string field."""
        chars = {c for row in self._train for v in row.values() if isinstance(v, str) for c in v}
        return "".join(sorted(chars))

    def max_response_tokens(self) -> int:
        """Longest ``answer`` (when present) plus EOS, else 32."""
        answers = [len(str(r["answer"])) for r in self._train if "answer" in r]
        return max(answers) + 1 if answers else 32
