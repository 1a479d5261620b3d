"""Tool parsers (kind ``tool_parser``): the Hermes / Qwen2.5 format and Mistral's.

* ``hermes``: each call is ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, after any
  text; what Qwen2.5, Qwen3 and the Hermes models write, and what their chat templates render.
* ``mistral``: the text, then ``[TOOL_CALLS]`` and a JSON list of ``{"name": ..., "arguments": ...}``
  objects; what Mistral 7B Instruct v0.3 and Mistral Nemo write.

A call that cannot be read (JSON that does not parse, no name, arguments that are not an object, a
``<tool_call>`` never closed) is a :class:`ToolCall` with ``error`` saying so and how a call is written.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from trinity_core.components import ParsedReply, ToolCall, ToolParser

__all__ = ["HermesParser", "MistralParser", "read_call"]


def read_call(value: Any, arguments_key: str, example: str) -> ToolCall:
    """A :class:`ToolCall` from a decoded JSON value ``{"name": str, arguments_key: object}``, or one
    with ``error`` set (``example`` shows the model how a call is written)."""
    if not isinstance(value, dict):
        return ToolCall(
            "", error=f"a call must be a JSON object, got {type(value).__name__}; write {example}"
        )
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", error=f'the call has no "name" (a non-empty string); write {example}')
    arguments = value.get(arguments_key, {})
    if isinstance(arguments, str):  # some models encode the arguments object as a JSON string
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        return ToolCall(
            name, error=f'"{arguments_key}" of the call to {name!r} must be a JSON object; write {example}'
        )
    return ToolCall(name, arguments)


def _json_error(exc: json.JSONDecodeError, example: str) -> str:
    return f"the call is not valid JSON ({exc.msg} at character {exc.pos}); write {example}"


class HermesParser(ToolParser):
    """Hermes / Qwen2.5 calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` after the text."""

    START: ClassVar[str] = "<tool_call>"
    END: ClassVar[str] = "</tool_call>"
    EXAMPLE: ClassVar[str] = '<tool_call>{"name": "<tool>", "arguments": {"<argument>": <value>}}</tool_call>'
    _BLOCK: ClassVar[re.Pattern[str]] = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str) -> ParsedReply:
        """Every ``<tool_call>`` block in order; the rest of the text is the content."""
        calls: list[ToolCall] = []
        pieces: list[str] = []
        position = 0
        for match in self._BLOCK.finditer(text):
            pieces.append(text[position : match.start()])
            calls.append(self._read(match.group(1)))
            position = match.end()
        rest = text[position:]
        unclosed = rest.find(self.START)
        if unclosed >= 0:
            pieces.append(rest[:unclosed])
            calls.append(
                ToolCall("", error=f"{self.START} was never closed with {self.END}; write {self.EXAMPLE}")
            )
        else:
            pieces.append(rest)
        return ParsedReply("".join(pieces).strip(), tuple(calls))

    def _read(self, body: str) -> ToolCall:
        try:
            value = json.loads(body)
        except json.JSONDecodeError as exc:
            return ToolCall("", error=_json_error(exc, self.EXAMPLE))
        return read_call(value, "arguments", self.EXAMPLE)

    def format(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """The content, then one block per call, as Qwen2.5's chat template renders them."""
        blocks = [
            f"{self.START}\n{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}\n"
            f"{self.END}"
            for c in calls
        ]
        return "\n".join([content, *blocks] if content else blocks)


class MistralParser(ToolParser):
    """Mistral calls: the text, then ``[TOOL_CALLS]`` and a JSON list of ``{"name", "arguments"}``."""

    MARKER: ClassVar[str] = "[TOOL_CALLS]"
    EXAMPLE: ClassVar[str] = '[TOOL_CALLS][{"name": "<tool>", "arguments": {"<argument>": <value>}}]'

    def parse(self, text: str) -> ParsedReply:
        """The calls after each ``[TOOL_CALLS]``; text before the first marker (and after a list) is the
        content."""
        segments = text.split(self.MARKER)
        pieces, calls = [segments[0]], []
        decoder = json.JSONDecoder()
        for segment in segments[1:]:
            body = segment.lstrip()
            try:
                value, end = decoder.raw_decode(body)
            except json.JSONDecodeError as exc:
                calls.append(ToolCall("", error=_json_error(exc, self.EXAMPLE)))
                continue
            items = value if isinstance(value, list) else [value]
            if not items:
                calls.append(
                    ToolCall("", error=f"{self.MARKER} is followed by no call; write {self.EXAMPLE}")
                )
            calls.extend(read_call(item, "arguments", self.EXAMPLE) for item in items)
            pieces.append(body[end:])
        return ParsedReply("".join(pieces).strip(), tuple(calls))

    def format(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """The content, then the marker and every call as one JSON list (no calls: the content alone)."""
        if not calls:
            return content
        payload = json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)
        return f"{content}{self.MARKER}{payload}"
