"""Checks of tool parsers: ``parse(text) -> ParsedReply`` and ``format(calls, content) -> str``.

A parser must read back what it writes (one call, several calls, nested and non-ASCII arguments, with
and without text before the calls), leave plain text alone, and never raise: every prefix of a written
call (a reply cut by the token budget) and every reply with a damaged call parses into a
:class:`~trinity_core.components.ParsedReply`, the damage reported as a call with ``error`` set.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from trinity_core.components.tool_parser import ParsedReply, ToolCall, ToolParser
from trinity_core.testing._core import ConformanceError, Subject, check

__all__ = ["ROUND_TRIP_CASES", "random_calls"]

ROUND_TRIP_CASES: tuple[tuple[str, tuple[ToolCall, ...]], ...] = (
    ("", (ToolCall("multiply", {"a": 123, "b": 4567}),)),
    ("Let me compute that.", (ToolCall("python", {"code": 'print("a\\nb")\nx = {"k": [1, 2]}'}),)),
    ("", (ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": -4.5}))),
    ("", (ToolCall("no_arguments", {}),)),
    ("Wetter:", (ToolCall("get_weather", {"city": "Zürich", "days": [1, 2], "units": None, "ok": True}),)),
    ("", (ToolCall("nested", {"filter": {"tags": ["a", "b"], "range": {"lo": 0, "hi": 1e6}}}),)),
)
"""Hand-chosen replies every parser must read back exactly: (content, calls)."""

PLAIN_TEXTS = ("The answer is 42.", "", "561741", "I would call a tool, but I know this one: 7.")
"""Replies without a call: parsed into no calls, the text itself as content."""


def random_calls(rng: random.Random, count: int) -> tuple[ToolCall, ...]:
    """``count`` calls with random names and JSON arguments (for round-trip checks)."""
    letters = "abcdefghijklmnopqrstuvwxyz_"

    def value(depth: int) -> Any:
        choice = rng.randrange(6 if depth < 2 else 4)
        if choice == 0:
            return rng.randint(-(10**6), 10**6)
        if choice == 1:
            return "".join(
                rng.choice(letters + " 0123456789\"'{}[]<>\n\\é") for _ in range(rng.randint(0, 12))
            )
        if choice == 2:
            return rng.choice([True, False, None])
        if choice == 3:
            return round(rng.uniform(-1e3, 1e3), 3)
        if choice == 4:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(letters[:-1]) + str(i): value(depth + 1) for i in range(rng.randint(0, 3))}

    def name() -> str:
        return rng.choice(letters[:-1]) + "".join(rng.choice(letters) for _ in range(rng.randint(0, 10)))

    return tuple(
        ToolCall(name(), {f"arg{i}": value(0) for i in range(rng.randint(0, 3))}) for _ in range(count)
    )


def _parse(subject: Subject, parser: ToolParser, text: str) -> ParsedReply:
    try:
        parsed = parser.parse(text)
    except Exception as exc:
        raise ConformanceError(
            f"{subject.describe()}: parse({text[:120]!r}) raised {type(exc).__name__}: {exc}",
            "never raise on model output: return ToolCall(name='', error='<what is wrong>') for a call "
            "that cannot be read, so the model sees the error inside its episode",
        ) from None
    if not isinstance(parsed, ParsedReply) or not all(isinstance(c, ToolCall) for c in parsed.calls):
        raise ConformanceError(
            f"{subject.describe()}: parse returned {parsed!r}, not a ParsedReply of ToolCall",
            "return trinity_core.components.ParsedReply(content, tuple_of_ToolCall)",
        )
    return parsed


def _round_trip(subject: Subject, parser: ToolParser, content: str, calls: Sequence[ToolCall]) -> None:
    text = parser.format(calls, content)
    parsed = _parse(subject, parser, text)
    if parsed.calls != tuple(calls) or parsed.content != content.strip():
        raise ConformanceError(
            f"{subject.describe()}: format({list(calls)!r}, {content!r}) wrote {text!r}, which parses "
            f"into content {parsed.content!r} and calls {list(parsed.calls)!r}",
            "make parse read back exactly what format writes (names, JSON arguments, the text before)",
        )


@check("tool_parser")
def check_tool_parser_reads_back_what_it_writes(subject: Subject) -> None:
    """parse(format(calls, content)) gives the calls and the content back (hand-picked and random calls)"""
    parser = subject.build()
    for content, calls in ROUND_TRIP_CASES:
        _round_trip(subject, parser, content, calls)
    rng = random.Random(0)
    for _ in range(50):
        _round_trip(
            subject, parser, rng.choice(["", "Thinking first."]), random_calls(rng, rng.randint(1, 3))
        )


@check("tool_parser")
def check_tool_parser_leaves_plain_text_alone(subject: Subject) -> None:
    """a reply without a call parses into no calls, its text as the content"""
    parser = subject.build()
    for text in PLAIN_TEXTS:
        parsed = _parse(subject, parser, text)
        if parsed.calls or parsed.content != text.strip():
            raise ConformanceError(
                f"{subject.describe()}: parse({text!r}) gave calls {list(parsed.calls)!r} and content "
                f"{parsed.content!r}",
                "a reply without the format's call markers is an answer: no calls, the text as content",
            )


@check("tool_parser")
def check_tool_parser_never_raises_on_damaged_calls(subject: Subject) -> None:
    """every prefix of a written call, and a call with damaged JSON, parses without raising"""
    parser = subject.build()
    text = parser.format([ToolCall("multiply", {"a": 123, "b": [4, {"c": "d"}]})], "")
    for end in range(len(text) + 1):
        _parse(subject, parser, text[:end])
    for damaged in (text.replace("}", "", 1), text.replace('"', "", 1), text.replace(":", ",")):
        parsed = _parse(subject, parser, damaged)
        if any(c.ok and c.name == "multiply" and c.arguments.get("a") != 123 for c in parsed.calls):
            raise ConformanceError(
                f"{subject.describe()}: the damaged call {damaged!r} parsed into {list(parsed.calls)!r}",
                "report a call whose JSON does not parse as ToolCall(error=...), do not guess arguments",
            )
