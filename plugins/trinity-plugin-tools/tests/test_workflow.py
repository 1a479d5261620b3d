"""The tools workflow with a scripted model: calls answered (good, malformed, unknown, bad arguments,
several per reply), tool tokens masked, turn and call limits, sync and async tools, timeouts, metrics."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tools_support import (
    HERE,
    TOKENIZER,
    call,
    exact_answer,
    only,
    run_episodes,
    turn_script,
)
from trinity_plugin_tools import MistralParser, ToolsWorkflow

from trinity_core.components import ToolCall
from trinity_core.testing.scripted import scripted_model
from trinity_core.workflows import WorkflowTask

MULTIPLY = {"tools": ["trinity_plugin_tools.multiply"]}


def model_text(exp: Any) -> str:
    """The tokens the action mask keeps, decoded (the model's replies and their EOS)."""
    response = exp.tokens[exp.prompt_length :]
    return TOKENIZER.decode(response[exp.action_mask].tolist())


def environment_text(exp: Any) -> str:
    """The tokens the action mask leaves out after the prompt (what the tools and the template added)."""
    response = exp.tokens[exp.prompt_length :]
    return TOKENIZER.decode(response[~exp.action_mask].tolist())


def test_a_good_call_is_answered_and_the_answer_rewarded() -> None:
    outcome, engine = run_episodes(turn_script(call("multiply", a=123, b=4567), "561741"), MULTIPLY)
    exp = only(outcome)
    assert exp.reward == 1.0
    assert exp.experience_type == "multi_turn"
    assert "<tool_response>561741</tool_response>" in engine.prompts[1]
    assert engine.prompts[0].startswith('<bos><tools>\n{"name": "multiply", "description": "Multiply two')
    assert exp.info["tool_calls"] == 1
    assert exp.info["end"] == "answer"
    assert outcome.metrics()["tools/success_with_calls"] == 1.0
    assert outcome.metrics()["tools/error_rate"] == 0.0


@pytest.mark.parametrize(
    ("reply", "kind", "message"),
    [
        (
            '<tool_call>{"name": "multiply", "arguments": {"a": 123, "b": 4567}</tool_call>',
            "parse_error",
            # The JSON's 55 characters end before its last brace.
            "error: the call is not valid JSON (Expecting ',' delimiter at character 55); write <tool_call>",
        ),
        (
            "<tool_call>multiply(123, 4567)",
            "parse_error",
            "error: <tool_call> was never closed with </tool_call>",
        ),
        ('<tool_call>{"arguments": {}}</tool_call>', "parse_error", 'error: the call has no "name"'),
        (call("divide", a=1, b=2), "unknown_tool", "error: unknown tool 'divide'; the tools are: multiply"),
        (
            call("multiply", a="123", b=4567),
            "bad_arguments",
            'error: bad arguments for multiply: a: Input should be a valid integer (got "123"); it takes '
            "(a: integer, b: integer)",
        ),
        (call("multiply", a=1.5, b=2), "bad_arguments", "a: Input should be a valid integer"),
        (call("multiply", a=1), "bad_arguments", "error: bad arguments for multiply: b: missing"),
        (call("multiply", a=1, b=2, c=3), "bad_arguments", "c: no such argument"),
    ],
)
def test_a_bad_call_is_an_error_message_inside_the_episode(reply: str, kind: str, message: str) -> None:
    """The model sees the error as the tool's answer, then answers; the episode is not a failure."""
    outcome, engine = run_episodes(turn_script(reply, "I give up"), MULTIPLY)
    exp = only(outcome)
    assert message in engine.prompts[1]
    assert exp.info[f"tool_{kind}"] == 1
    assert exp.info["tool_calls"] == 1
    assert exp.reward == 0.0
    metrics = outcome.metrics()
    assert metrics["tools/error_rate"] == 1.0
    assert metrics[f"tools/{kind}_rate"] == 1.0
    assert metrics["tools/success_with_calls"] == 0.0


def test_several_calls_in_one_reply_are_answered_in_order() -> None:
    args = {"tools": ["trinity_plugin_tools.multiply", f"{HERE}.add", f"{HERE}.total"]}
    reply = "\n".join(
        [call("multiply", a=6, b=7), call("add", a=2, b=3), call("total", xs=[1, 2, 3]), call("nope")]
    )
    outcome, engine = run_episodes(
        turn_script(reply, "42"), args, [{"prompt": "q", "answer": "42"}], max_new_tokens=400
    )
    exp = only(outcome)
    results = engine.prompts[1].split("</tool_call><eos>\n", 1)[1]
    assert results == (
        "<tool_response>42</tool_response>\n<tool_response>5</tool_response>\n"
        "<tool_response>6.0</tool_response>\n<tool_response>error: unknown tool 'nope'; the tools are: "
        "multiply, add, total</tool_response>\n<assistant>"
    )
    assert exp.info["tool_calls"] == 4
    assert exp.info["tool_unknown_tool"] == 1
    assert outcome.metrics()["tools/error_rate"] == 0.25
    assert exp.reward == 1.0


def test_tool_tokens_never_carry_loss() -> None:
    """The action mask keeps exactly the model's replies and their EOS; the tool's answer and the
    template's text between the turns are environment tokens."""
    first, answer = call("multiply", a=123, b=4567), "561741"
    exp = only(run_episodes(turn_script(first, answer), MULTIPLY)[0])
    assert model_text(exp) == f"{first}<eos>{answer}<eos>"
    assert environment_text(exp) == "\n<tool_response>561741</tool_response>\n<assistant>"
    assert exp.action_mask is not None
    assert exp.logprobs is not None
    assert len(exp.action_mask) == len(exp.logprobs) == len(exp.tokens) - exp.prompt_length


reply_texts = st.one_of(
    st.text(alphabet="abcxyz 0123456789.,!?", max_size=20),
    st.builds(lambda a, b: call("multiply", a=a, b=b), st.integers(0, 10**4), st.integers(0, 10**4)),
    st.builds(lambda t: call("echo", text=t), st.text(alphabet="abc<>/{}\"' ", max_size=12)),
    st.just("<tool_call>{oops"),
)


@settings(max_examples=40, deadline=None)
@given(replies=st.lists(reply_texts, min_size=1, max_size=4))
def test_any_episode_keeps_exactly_the_replies_in_the_loss(replies: list[str]) -> None:
    """Whatever the model writes, the kept tokens are its replies (each with EOS) and nothing else."""
    args = {"tools": ["trinity_plugin_tools.multiply", f"{HERE}.echo"], "max_turns": 4, "max_tool_calls": 8}
    task = WorkflowTask({"prompt": "q", "answer": "no"}, reward_fn=exact_answer({"answer": "no"}))
    model = scripted_model(TOKENIZER, turn_script(*replies), max_new_tokens=200)
    (exp,) = ToolsWorkflow(task=task, model=model, **args).run()
    turns = exp.info["turns"]
    assert model_text(exp) == "".join(f"{r}<eos>" for r in (replies + [replies[-1]] * 4)[:turns])
    assert environment_text(exp).count("<tool_response>") == exp.info["tool_calls"]


def test_max_turns_ends_an_episode_that_keeps_calling() -> None:
    """Every reply calls: 3 replies, the first two answered, the third's call never run."""
    outcome, engine = run_episodes(turn_script(call("multiply", a=1, b=2)), {**MULTIPLY, "max_turns": 3})
    exp = only(outcome)
    assert exp.info["turns"] == 3
    assert exp.info["tool_calls"] == 2
    assert exp.info["end"] == "max_turns"
    assert len(engine.prompts) == 3
    assert outcome.metrics()["tools/max_turns_reached"] == 1.0
    assert exp.reward == 0.0  # the last reply has no answer outside its call


def test_max_tool_calls_ends_the_episode_before_running_calls_past_it() -> None:
    """Two calls a reply and a budget of three: the first reply's calls run, the second reply would
    make four, so the episode ends there with two calls made."""
    two = "\n".join([call("multiply", a=1, b=2), call("multiply", a=3, b=4)])
    outcome, _ = run_episodes(turn_script(two), {**MULTIPLY, "max_turns": 5, "max_tool_calls": 3})
    exp = only(outcome)
    assert exp.info["tool_calls"] == 2
    assert exp.info["turns"] == 2
    assert exp.info["end"] == "max_tool_calls"
    assert outcome.metrics()["tools/max_tool_calls_reached"] == 1.0


def test_no_tool_calls_allowed_ends_at_the_first_call() -> None:
    outcome, _ = run_episodes(turn_script(call("multiply", a=1, b=2)), {**MULTIPLY, "max_tool_calls": 0})
    info = only(outcome).info
    assert (info["tool_calls"], info["turns"], info["end"]) == (0, 1, "max_tool_calls")


@pytest.mark.parametrize("tool", ["sleepy", "sleepy_async"])
def test_a_tool_past_its_timeout_is_a_timeout_error(tool: str) -> None:
    args = {"tools": [f"{HERE}.{tool}"], "tool_timeout_s": 0.2}
    outcome, engine = run_episodes(turn_script(call(tool, seconds=30), "done"), args)
    exp = only(outcome)
    assert f"error: {tool} did not answer within 0.2 s" in engine.prompts[1]
    assert exp.info["tool_timeout"] == 1
    assert outcome.metrics()["tools/timeout_rate"] == 1.0


def test_sync_and_async_tools_answer_and_a_raising_tool_is_an_error() -> None:
    args = {"tools": [f"{HERE}.sleepy", f"{HERE}.sleepy_async", f"{HERE}.broken"], "tool_timeout_s": 5}
    reply = "\n".join([call("sleepy", seconds=0), call("sleepy_async", seconds=0), call("broken", x=3)])
    outcome, engine = run_episodes(turn_script(reply, "ok"), args)
    assert "<tool_response>awake</tool_response>\n<tool_response>awake</tool_response>" in engine.prompts[1]
    assert (
        "<tool_response>error: broken raised ValueError: cannot handle 3</tool_response>" in engine.prompts[1]
    )
    assert only(outcome).info["tool_tool_error"] == 1


def test_episodes_are_batched_one_generate_per_turn() -> None:
    """Four episodes needing 1 to 4 replies: four batched calls for the step, not ten."""

    def script(prompt: str) -> str:
        need = int(prompt.split("<user>")[1][0])
        done = prompt.count("<assistant>") - 1
        return call("multiply", a=done, b=1) if done + 1 < need else "done"

    rows = [{"prompt": f"{n}", "answer": "done"} for n in (1, 2, 3, 4)]
    outcome, _ = run_episodes(script, {**MULTIPLY, "max_turns": 4}, rows)
    assert outcome.generate_calls == 4
    assert outcome.turns == [1, 2, 3, 4]
    assert [exp.reward for exp in outcome.experiences] == [1.0] * 4
    assert outcome.metrics()["tools/calls_per_episode"] == 1.5  # 0 + 1 + 2 + 3 over 4


def test_step_experiences_count_each_episode_once_in_the_metrics() -> None:
    outcome, _ = run_episodes(
        turn_script(call("multiply", a=123, b=4567), "561741"), {**MULTIPLY, "experience": "step"}, repeat=2
    )
    assert [(exp.eid.run, exp.eid.step) for exp in outcome.experiences] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(exp.reward == 1.0 for exp in outcome.experiences)
    assert outcome.metrics()["tools/calls_per_episode"] == 1.0


def test_the_step_metrics_by_hand() -> None:
    """Three episodes: a solved one with a good call, an unsolved one with a malformed and an unknown
    call, a solved one without calls. Calls 3, errors 2: error rate 2/3."""
    rows = [
        {"prompt": "a", "answer": "6"},
        {"prompt": "b", "answer": "6"},
        {"prompt": "c", "answer": "6"},
    ]
    scripts = {
        "a": [call("multiply", a=2, b=3), "6"],
        "b": ["\n".join(["<tool_call>{</tool_call>", call("divide", a=1, b=1)]), "7"],
        "c": ["6"],
    }

    def script(prompt: str) -> str:
        replies = scripts[prompt.split("<user>")[1][0]]
        return replies[min(prompt.count("<assistant>") - 1, len(replies) - 1)]

    metrics = run_episodes(script, MULTIPLY, rows)[0].metrics()
    assert metrics["tools/calls_per_episode"] == 1.0
    assert metrics["tools/error_rate"] == pytest.approx(2 / 3)
    assert metrics["tools/parse_error_rate"] == pytest.approx(1 / 3)
    assert metrics["tools/unknown_tool_rate"] == pytest.approx(1 / 3)
    assert metrics["tools/bad_arguments_rate"] == 0.0
    assert metrics["tools/episodes_with_calls"] == pytest.approx(2 / 3)
    assert metrics["tools/success_with_calls"] == 0.5
    assert metrics["tools/success_without_calls"] == 1.0
    assert metrics["tools/turns"] == pytest.approx(5 / 3)


def test_without_calls_success_without_calls_is_nan_not_zero() -> None:
    metrics = run_episodes(turn_script("561741"), MULTIPLY)[0].metrics()
    assert metrics["tools/success_without_calls"] == 1.0
    assert math.isnan(metrics["tools/success_with_calls"])
    assert metrics["tools/error_rate"] == 0.0


def test_the_mistral_format_and_the_python_tool() -> None:
    reply = MistralParser().format([ToolCall("python", {"code": "x = 6 * 7\nprint(x)\nx + 1"})])
    args = {"tools": ["trinity_plugin_tools.python"], "parser": "mistral"}
    outcome, engine = run_episodes(turn_script(reply, "42"), args, [{"prompt": "q", "answer": "42"}])
    assert "<tool_response>42\n43\n</tool_response>" in engine.prompts[1]
    assert only(outcome).reward == 1.0


def test_the_python_tool_timeout_and_crash_are_tool_errors() -> None:
    args = {"tools": [f"{HERE}.quick_python"], "tool_timeout_s": 30}
    reply = "\n".join([call("python", code="while True: pass"), call("python", code="1/0")])
    outcome, engine = run_episodes(turn_script(reply, "x"), args)
    exp = only(outcome)
    assert "error: python timed out: the program ran past the 1 s wall-clock limit" in engine.prompts[1]
    assert "ZeroDivisionError: division by zero" in engine.prompts[1]
    assert exp.info["tool_timeout"] == 1
    assert exp.info["tool_tool_error"] == 1


def test_a_long_result_is_cut_for_the_model() -> None:
    args = {"tools": [f"{HERE}.echo"], "max_result_chars": 16}
    outcome, engine = run_episodes(turn_script(call("echo", text="x" * 100), "ok"), args)
    assert (
        "<tool_response>xxxxxxxxxxxxxxxx\n... [84 more characters cut]</tool_response>" in engine.prompts[1]
    )
    assert not outcome.failures


def test_no_reward_function_applies_no_experience() -> None:
    task = WorkflowTask({"prompt": "q"}, reward_fn=lambda c, i, t: [None] * len(c))
    model = scripted_model(TOKENIZER, turn_script("7"))
    assert ToolsWorkflow(task=task, model=model, **MULTIPLY).run() == []


def test_a_system_prompt_and_a_conversation_row() -> None:
    row = {"prompt_messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "answer": "7"}
    args = {**MULTIPLY, "system_prompt": "Use tools."}
    outcome, engine = run_episodes(turn_script("7"), args, [row])
    assert engine.prompts[0].endswith("<system>Use tools.</system>\n<user>hi</user>\n<assistant>")
    assert only(outcome).reward == 1.0


def test_a_truncated_reply_keeps_its_tokens_and_the_episode_goes_on() -> None:
    """A call cut by the token budget is an unclosed call (a parse error); the next reply answers."""
    long_call = call("multiply", a=123456789, b=987654321)
    outcome, engine = run_episodes(turn_script(long_call, "ok"), MULTIPLY, max_new_tokens=30)
    exp = only(outcome)
    assert exp.info["tool_parse_error"] == 1
    assert model_text(exp) == long_call[:30] + "ok<eos>"  # no EOS after the cut reply
    assert "error: <tool_call> was never closed" in engine.prompts[1]
    # The template's EOS after the cut reply is the environment's: the model never produced it.
    assert environment_text(exp).startswith("<eos>\n<tool_response>error: <tool_call> was never closed")
