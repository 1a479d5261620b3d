"""Shared by the tools tests: a character tokenizer, tools of every sort, scripted episodes."""

from __future__ import annotations

import asyncio
import string
import time
from collections.abc import Callable, Sequence
from typing import Any

from trinity_plugin_tools import HermesParser, ToolsWorkflow, make_python_tool

from trinity_core.components import ToolCall
from trinity_core.experience import Experience
from trinity_core.testing.scripted import ScriptedEngine
from trinity_core.train.models.policy import build_char_tokenizer
from trinity_core.workflows import EpisodeOutcome, WorkflowRunner, make_tasks

TOKENIZER = build_char_tokenizer(string.printable)
HERMES = HermesParser()
HERE = "tools_support"
"""Module path of the tools below (the tests' folder is on sys.path, as pytest puts it there)."""


def call(name: str, **arguments: Any) -> str:
    """A Hermes reply with one call."""
    return HERMES.format([ToolCall(name, arguments)])


def echo(text: str) -> str:
    """Return the text.

    Args:
        text: Any text.
    """
    return text


async def add(a: int, b: int) -> int:
    """Add two integers (an async tool).

    Args:
        a: The first term.
        b: The second term.
    """
    await asyncio.sleep(0)
    return a + b


def total(xs: list[int], scale: float = 1.0) -> float:
    """Sum a list of integers, times a scale.

    Args:
        xs: The integers.
        scale: A factor.
    """
    return sum(xs) * scale


def sleepy(seconds: float) -> str:
    """Sleep, then say so (a sync tool that may run past its timeout).

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "awake"


async def sleepy_async(seconds: float) -> str:
    """Sleep without blocking, then say so.

    Args:
        seconds: How long to sleep.
    """
    await asyncio.sleep(seconds)
    return "awake"


def broken(x: int) -> int:
    """Always fails.

    Args:
        x: Ignored.
    """
    raise ValueError(f"cannot handle {x}")


def untyped(x):  # type: ignore[no-untyped-def]
    """No type hints.

    Args:
        x: Something.
    """
    return x


def undocumented(x: int) -> int:  # the missing docstring is the point
    return x


quick_python = make_python_tool(timeout_s=1, cpu_s=1, max_output_chars=200)
"""The python tool with a 1 s limit (its tool name is still ``python``)."""


def turn_script(*replies: str) -> Callable[[str], str]:
    """A script replying ``replies[k]`` at the k-th reply of each episode (the last one after that)."""

    def script(prompt: str) -> str:
        turn = prompt.count("<assistant>") - 1
        return replies[min(turn, len(replies) - 1)]

    return script


def exact_answer(row: dict[str, Any]) -> Callable[..., list[float | None]]:
    """The run's reward functions bound to ``row``: 1 when the answer equals ``row["answer"]``."""

    def score(
        completions: list[str], ids: list[tuple[int, ...]], truncated: list[bool]
    ) -> list[float | None]:
        return [float(c == str(row.get("answer"))) for c in completions]

    return score


def run_episodes(
    script: Callable[[str], str],
    args: dict[str, Any],
    rows: Sequence[dict[str, Any]] = ({"prompt": "123*4567", "answer": "561741"},),
    *,
    repeat: int = 1,
    max_new_tokens: int = 400,
) -> tuple[EpisodeOutcome, ScriptedEngine]:
    """The episodes of ``rows`` (``repeat`` runs each) with the scripted model, through the runner."""
    engine = ScriptedEngine(TOKENIZER, script, {"max_new_tokens": max_new_tokens})
    runner = WorkflowRunner("tools", ToolsWorkflow, args, engine)
    tasks = make_tasks(ToolsWorkflow, list(rows), step=0, task_offset=0, repeat_times=repeat)
    for task in tasks:
        task.reward_fn = exact_answer(task.raw_task)
    return runner.run(tasks), engine


def only(outcome: EpisodeOutcome) -> Experience:
    """The one experience of a one-episode outcome (no episode failed)."""
    assert not outcome.failures, outcome.failures
    assert len(outcome.experiences) == 1
    return outcome.experiences[0]


def multiply_again(a: int, b: int) -> int:
    """Multiply (a second tool of the same name, once renamed below).

    Args:
        a: A factor.
        b: A factor.
    """
    return a * b


multiply_again.__name__ = "multiply"
