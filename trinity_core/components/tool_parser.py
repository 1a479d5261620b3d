"""The tool-parser contract (kind ``tool_parser``, namespace ``trinity_core.tool_parsers``).

A tool parser reads the function calls out of a model's reply in one model family's format (Hermes /
Qwen2.5 ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, Mistral ``[TOOL_CALLS][...]``, ...)
and writes calls in that same format, which is what a supervised warm start trains on::

    class MyParser(ToolParser):
        \"\"\"Calls as ``CALL name {json arguments}`` lines.\"\"\"

        def parse(self, text: str) -> ParsedReply:
            ...

        def format(self, calls: Sequence[ToolCall], content: str = "") -> str:
            ...

A reply that breaks the format (JSON that does not parse, a call without a name) is never an exception:
it is a :class:`ToolCall` with ``error`` set, which the tool-using workflow shows the model as the tool's
answer, so that a malformed call is a lesson inside the episode and never a failed run.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trinity_core.components.base import Component

__all__ = ["ParsedReply", "ToolCall", "ToolParser"]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for.

    Attributes:
        name: the tool's name ("" when the call is malformed and names none).
        arguments: the arguments as JSON values (``{}`` for a malformed call).
        error: None for a well-formed call; otherwise why it could not be read (shown to the model).
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the call was read (``error`` is None)."""
        return self.error is None


@dataclass(frozen=True)
class ParsedReply:
    """A reply split into its text and its calls.

    Attributes:
        content: the reply without its calls, stripped (the answer, when there are no calls).
        calls: the calls in the order they appear, malformed ones included (with ``error`` set).
    """

    content: str
    calls: tuple[ToolCall, ...] = ()

    @property
    def has_calls(self) -> bool:
        """Whether the model tried to call a tool (a malformed call counts: it gets an error back)."""
        return bool(self.calls)


class ToolParser(Component):
    """Base of tool parsers: :meth:`parse` a reply into text and calls, :meth:`format` calls as a reply."""

    kind: ClassVar[str] = "tool_parser"

    @abstractmethod
    def parse(self, text: str) -> ParsedReply:
        """The calls of ``text`` (never raises: a malformed call is a :class:`ToolCall` with ``error``)."""

    @abstractmethod
    def format(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """A reply with ``content`` first, then ``calls``, written as the model is taught to write them;
        ``parse(format(calls, content))`` gives back ``content.strip()`` and ``calls``."""
