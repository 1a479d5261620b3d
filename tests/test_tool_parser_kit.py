"""The conformance kit's tool-parser checks catch broken parsers (and pass a correct one)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from trinity_core import registry
from trinity_core.components import KIND_BASES, ParsedReply, ToolCall, ToolParser
from trinity_core.testing import ConformanceError, Subject, check_names
from trinity_core.testing.tool_parser import (
    check_tool_parser_leaves_plain_text_alone,
    check_tool_parser_never_raises_on_damaged_calls,
    check_tool_parser_reads_back_what_it_writes,
)


class Good(ToolParser):
    """Calls as ``CALL {"name": ..., "arguments": ...}`` lines after the text."""

    def parse(self, text: str) -> ParsedReply:
        """Every line starting with CALL is a call."""
        content, calls = [], []
        for line in text.split("\n"):
            if not line.startswith("CALL "):
                content.append(line)
                continue
            try:
                value = json.loads(line[5:])
            except json.JSONDecodeError as exc:
                calls.append(ToolCall("", error=str(exc)))
                continue
            if isinstance(value, dict) and isinstance(value.get("name"), str):
                calls.append(ToolCall(value["name"], dict(value.get("arguments") or {})))
            else:
                calls.append(ToolCall("", error="no name"))
        return ParsedReply("\n".join(content).strip(), tuple(calls))

    def format(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """One CALL line per call after the content."""
        lines = [f"CALL {json.dumps({'name': c.name, 'arguments': c.arguments})}" for c in calls]
        return "\n".join([content, *lines] if content else lines)


class Raises(Good):
    """Lets the JSON error out."""

    def parse(self, text: str) -> ParsedReply:
        calls = [json.loads(line[5:]) for line in text.split("\n") if line.startswith("CALL ")]
        return ParsedReply("", tuple(ToolCall(c["name"], c["arguments"]) for c in calls))


class DropsArguments(Good):
    """Reads the name and forgets the arguments."""

    def parse(self, text: str) -> ParsedReply:
        parsed = super().parse(text)
        return ParsedReply(parsed.content, tuple(ToolCall(c.name, {}, c.error) for c in parsed.calls))


class EatsText(Good):
    """Treats every reply as one call to a tool named after its first word."""

    def parse(self, text: str) -> ParsedReply:
        parsed = super().parse(text)
        if parsed.calls:
            return parsed
        word = re.findall(r"\w+", text)
        return ParsedReply("", (ToolCall(word[0] if word else "x", {}),))


def subject(cls: type) -> Subject:
    return Subject("tool_parser", cls.__name__, cls, "<unregistered>")


def test_the_kind_is_registered_with_its_base_and_checks() -> None:
    assert registry.get_kind("tool_parser").namespace == "trinity_core.tool_parsers"
    assert KIND_BASES["tool_parser"] == (ToolParser,)
    names = check_names("tool_parser")
    assert {"tool_parser_reads_back_what_it_writes", "has_summary", "args_fields_documented"} <= set(names)


def test_a_good_parser_passes_and_reads_its_format() -> None:
    for chk in (
        check_tool_parser_reads_back_what_it_writes,
        check_tool_parser_leaves_plain_text_alone,
        check_tool_parser_never_raises_on_damaged_calls,
    ):
        chk(subject(Good))
    text = Good().format([ToolCall("f", {"x": 1})], "hm")
    assert text == 'hm\nCALL {"name": "f", "arguments": {"x": 1}}'
    assert Good().parse(text) == ParsedReply("hm", (ToolCall("f", {"x": 1}),))
    assert not ToolCall("", error="bad").ok
    assert ParsedReply("a").has_calls is False


@pytest.mark.parametrize(
    ("cls", "check", "message"),
    [
        (Raises, check_tool_parser_never_raises_on_damaged_calls, "raised JSONDecodeError"),
        (DropsArguments, check_tool_parser_reads_back_what_it_writes, "which parses into"),
        (EatsText, check_tool_parser_leaves_plain_text_alone, "gave calls"),
    ],
)
def test_broken_parsers_fail_their_check(cls: type, check: Any, message: str) -> None:
    with pytest.raises(ConformanceError, match=message):
        check(subject(cls))
