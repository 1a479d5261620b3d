"""``format``: 1.0 when the whole completion matches a regular expression (a reasoning format)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, field_validator

from trinity_core.components.base import Component, ComponentArgs
from trinity_core.train.data.rewards import Completion, completion_text

__all__ = ["DEFAULT_PATTERN", "FormatReward"]

DEFAULT_PATTERN = r"<think>.*</think>\s*<answer>.*</answer>"
"""Reasoning in ``<think>``, then the answer in ``<answer>`` (the DeepSeek-R1 format)."""


class _Args(ComponentArgs):
    pattern: str = Field(
        DEFAULT_PATTERN,
        description="Regular expression (Python re) the whole completion must match; '.' matches newlines.",
    )
    strip: bool = Field(True, description="Ignore whitespace around the completion.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression ({exc})") from None
        return value


class FormatReward(Component):
    """1.0 when the whole completion matches a regular expression (``pattern``), else 0.0.

    The test is ``re.fullmatch(pattern, completion, re.DOTALL)``. Set the pattern with
    ``tasks.reward_fn_args: {format: {pattern: '...'}}``; a pattern that does not compile is a configuration
    error before training.
    """

    kind: ClassVar[str] = "reward_fn"
    Args: ClassVar[type[ComponentArgs]] = _Args
    pattern: str
    strip: bool

    def __init__(self, **args: Any) -> None:
        """Validate the arguments and compile the pattern once."""
        super().__init__(**args)
        self._regex = re.compile(self.pattern, re.DOTALL)

    def __call__(self, completions: Sequence[Completion], **kwargs: Any) -> list[float | None]:
        """One score per completion, a string or TRL's conversational form (every other argument is
        ignored)."""
        texts = [completion_text(c) for c in completions]
        return [
            1.0 if self._regex.fullmatch(t.strip() if self.strip else t) is not None else 0.0 for t in texts
        ]
