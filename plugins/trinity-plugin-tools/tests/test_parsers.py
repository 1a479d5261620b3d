"""The hermes and mistral parsers: the formats as the models write them, round trips of any call,
malformed calls as errors, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_tools import HermesParser, MistralParser

from trinity_core.components import ParsedReply, ToolCall

HERMES, MISTRAL = HermesParser(), MistralParser()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**9), 10**9)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
calls = st.lists(
    st.builds(
        ToolCall,
        st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
        st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), json_values, max_size=4),
    ),
    min_size=1,
    max_size=3,
)
contents = st.text(alphabet=st.characters(blacklist_characters="[<"), max_size=30)
"""Text before the calls (without the formats' markers)."""


@pytest.mark.parametrize("parser", [HERMES, MISTRAL], ids=["hermes", "mistral"])
@settings(max_examples=200, deadline=None)
@given(calls=calls, content=contents)
def test_any_calls_read_back(parser: Any, calls: list[ToolCall], content: str) -> None:
    parsed = parser.parse(parser.format(calls, content))
    assert parsed == ParsedReply(content.strip(), tuple(calls))


@pytest.mark.parametrize("parser", [HERMES, MISTRAL], ids=["hermes", "mistral"])
@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='<>/[]{}":, tool_call_TOOLS_CALLS name arguments 0123', max_size=80))
def test_any_text_parses_without_raising(parser: Any, text: str) -> None:
    """Whatever the model writes: a ParsedReply, each call either read or carrying its error."""
    parsed = parser.parse(text)
    assert isinstance(parsed, ParsedReply)
    for c in parsed.calls:
        assert (c.error is None and c.name) or (c.error and not c.arguments)


def test_hermes_reads_qwen25s_layout() -> None:
    """Qwen2.5's chat template renders calls as below; the model writes the same."""
    text = (
        "I will look it up.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    )
    assert HERMES.parse(text) == ParsedReply(
        "I will look it up.",
        (ToolCall("get_weather", {"city": "Paris", "days": 2}), ToolCall("get_time", {})),
    )
    assert (
        HERMES.format([ToolCall("f", {"x": 1})], "hm")
        == 'hm\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    )


def test_mistral_reads_its_layout() -> None:
    text = (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "now", "arguments": {}}]'
    )
    assert MISTRAL.parse(text) == ParsedReply(
        "", (ToolCall("get_weather", {"city": "Paris"}), ToolCall("now", {}))
    )
    assert MISTRAL.parse('Hm [TOOL_CALLS] {"name": "now", "arguments": {}} ok') == ParsedReply(
        "Hm  ok", (ToolCall("now", {}),)
    )
    assert (
        MISTRAL.format([ToolCall("f", {"x": 1})], "hm")
        == 'hm[TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}]'
    )
    assert MISTRAL.format([], "just text") == "just text"


def test_arguments_written_as_a_json_string_are_read() -> None:
    """Some models encode the arguments object as a string."""
    body = json.dumps({"name": "f", "arguments": json.dumps({"x": [1, 2]})})
    assert HERMES.parse(f"<tool_call>{body}</tool_call>").calls == (ToolCall("f", {"x": [1, 2]}),)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "<tool_call>{oops}</tool_call>",
            "the call is not valid JSON (Expecting property name enclosed in double",
        ),
        ('<tool_call>["f", 1]</tool_call>', "a call must be a JSON object, got list"),
        ('<tool_call>{"name": ""}</tool_call>', 'the call has no "name" (a non-empty string)'),
        ('<tool_call>{"name": 3}</tool_call>', 'the call has no "name"'),
        (
            '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
            "\"arguments\" of the call to 'f' must be a JSON object",
        ),
        ('<tool_call>{"name": "f", "arguments": "x=1"}</tool_call>', '"arguments" of the call to'),
        ('text <tool_call>{"name": "f"', "<tool_call> was never closed with </tool_call>"),
    ],
)
def test_malformed_hermes_calls_are_errors(text: str, error: str) -> None:
    (bad,) = HERMES.parse(text).calls
    assert not bad.ok
    assert bad.error is not None
    assert bad.error.startswith(error)
    assert bad.error.endswith(
        'write <tool_call>{"name": "<tool>", "arguments": {"<argument>": <value>}}</tool_call>'
    )


def test_a_good_call_beside_a_bad_one_is_kept_in_order() -> None:
    text = '<tool_call>{bad</tool_call><tool_call>{"name": "f", "arguments": {}}</tool_call>'
    first, second = HERMES.parse(text).calls
    assert first.error is not None
    assert second == ToolCall("f", {})


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[TOOL_CALLS] not json", "the call is not valid JSON (Expecting value at character 0)"),
        ("[TOOL_CALLS][]", "[TOOL_CALLS] is followed by no call"),
        ('[TOOL_CALLS][{"arguments": {}}]', 'the call has no "name"'),
    ],
)
def test_malformed_mistral_calls_are_errors(text: str, error: str) -> None:
    (bad,) = MISTRAL.parse(text).calls
    assert bad.error is not None
    assert bad.error.startswith(error)


def test_plain_text_has_no_calls() -> None:
    for parser in (HERMES, MISTRAL):
        assert parser.parse("  561741 \n") == ParsedReply("561741")
        assert not parser.parse("tool_call: none").has_calls
