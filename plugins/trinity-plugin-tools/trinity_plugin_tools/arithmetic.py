"""The task that needs a tool: products of 3- and 4-digit numbers, with a ``multiply`` tool.

``multiplication`` (kind ``task``) draws ``{"prompt": "123*4567", "answer": "561741"}`` rows, scored by
``exact_match``; its alphabet is printable ASCII, so a character-level tokenizer covers the chat
template and the tools' JSON schemas. :func:`multiply` is the tool, in TRL's convention.
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

import torch
from pydantic import Field, model_validator

from trinity_core.components import ComponentArgs
from trinity_core.train import Task

__all__ = ["MultiplicationTask", "multiply"]


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


class _Args(ComponentArgs):
    min_digits: int = Field(3, ge=1, le=9, description="Fewest digits of a factor.")
    max_digits: int = Field(4, ge=1, le=9, description="Most digits of a factor.")

    @model_validator(mode="after")
    def _ordered(self) -> _Args:
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits {self.min_digits} exceeds max_digits {self.max_digits}")
        return self


class MultiplicationTask(Task):
    """Products of two numbers of ``min_digits`` to ``max_digits`` digits: ``{"prompt": "123*4567",
    "answer": "561741"}``; too hard to learn by heart for a small model, easy with a ``multiply`` tool."""

    Args: ClassVar[type[ComponentArgs]] = _Args
    min_digits: int
    max_digits: int

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``answer``."""
        return ("prompt", "answer")

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """``n`` rows, each factor's digit count uniform in the range, then the factor uniform."""
        digits = torch.randint(self.min_digits, self.max_digits + 1, (n, 2), generator=generator)
        low = (10 ** (digits - 1)).double()
        factors = (low + torch.rand((n, 2), generator=generator, dtype=torch.float64) * 9 * low).long()
        return [{"prompt": f"{a}*{b}", "answer": str(a * b)} for a, b in factors.tolist()]

    def alphabet(self) -> str:
        """Printable ASCII: the prompts, the answers, the chat template, JSON schemas and tool calls."""
        return string.printable

    def max_response_tokens(self) -> int:
        """A Hermes call to ``multiply`` with two 4-digit factors, with room."""
        return 96
