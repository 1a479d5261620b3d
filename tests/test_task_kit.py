"""The conformance kit's task-set suite: the core's task sets pass it; a task set that draws from the
global random state, whose rows lack a declared field, whose alphabet misses a character, whose budget
cuts its answers or whose default breaks its constraint fails exactly the check for that (the plugins'
task sets, ``frozen_lake`` and ``reasoning_gym``, run it through their PluginConformance tests)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from trinity_core.registry import reset_registry
from trinity_core.testing import TaskConformance, check_names

pytest_plugins = ["pytester"]

DATA = Path(__file__).resolve().parent / "data" / "tiny_task.jsonl"


class TestLastDigit(TaskConformance):
    component = "last_digit"


class TestAddMod(TaskConformance):
    component = "addmod"
    args: ClassVar[dict[str, Any]] = {"digits": 2, "modulus": 1000}


class TestCopy(TaskConformance):
    component = "copy"


class TestReverse(TaskConformance):
    component = "reverse"
    args: ClassVar[dict[str, Any]] = {"length": 5, "letters": "xyz"}


class TestDataset(TaskConformance):
    component = "dataset"
    args: ClassVar[dict[str, Any]] = {"path": str(DATA)}


BROKEN = '''
import random

import torch
from pydantic import Field

from trinity_core import registry
from trinity_core.components import ComponentArgs
from trinity_core.testing import TaskConformance
from trinity_core.train.data.tasks import LastDigitTask, Task


class GlobalRandom(LastDigitTask):
    """Last digit of a+b, operands from the global random module."""

    def sample(self, n, generator):
        ab = [(random.randint(0, 9), random.randint(0, 9)) for _ in range(n)]
        return [{"prompt": f"{a}+{b}=", "answer": str((a + b) % 10)} for a, b in ab]


class MissingField(LastDigitTask):
    """Last digit of a+b, declaring a field no row has."""

    @property
    def fields(self):
        return ("prompt", "answer", "difficulty")


class NarrowAlphabet(LastDigitTask):
    """Last digit of a+b, with an alphabet that forgot '+'."""

    def alphabet(self):
        return "0123456789="


class ShortBudget(Task):
    """Sum of a+b written out in full: answers of up to two digits, a budget of one token."""

    class Args(ComponentArgs):
        pass

    @property
    def fields(self):
        return ("prompt", "answer")

    def sample(self, n, generator):
        ab = torch.randint(5, 10, (n, 2), generator=generator).tolist()
        return [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in ab]

    def max_response_tokens(self):
        return 1


class BadDefault(LastDigitTask):
    """Last digit of a+b with a digits default that breaks its own constraint."""

    class Args(ComponentArgs):
        digits: int = Field(0, ge=1, le=6, description="Digits of each operand.")


for name, cls in [("global_random", GlobalRandom), ("missing_field", MissingField),
                  ("narrow_alphabet", NarrowAlphabet), ("short_budget", ShortBudget),
                  ("bad_default", BadDefault)]:
    registry.register("task", name, cls)
    globals()[f"Test_{name}"] = type(f"Test_{name}", (TaskConformance,), {"component": name})
'''


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_registry()
    yield
    reset_registry()


def test_the_suite_has_the_task_checks() -> None:
    names = check_names("task")
    for check in (
        "args_validate_with_defaults",
        "builds_without_gpu",
        "task_rows_have_the_fields",
        "task_sample_is_deterministic",
        "task_eval_rows",
        "task_alphabet_covers_the_rows",
        "task_response_budget_fits_the_answers",
    ):
        assert check in names


@pytest.mark.usefixtures("fresh_registry")
def test_each_broken_task_set_fails_its_own_check(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=textwrap.dedent(BROKEN))
    result = pytester.runpytest_inprocess(
        "-p", "trinity_core.testing.plugin", "-v", "-rs", "-p", "no:cacheprovider"
    )
    outcomes = {
        m.group(1): m.group(2)
        for m in (re.search(r"\[([^\]]+)\] (PASSED|FAILED|SKIPPED)", line) for line in result.outlines)
        if m
    }
    failed = sorted(case for case, outcome in outcomes.items() if outcome == "FAILED")
    assert failed == [
        "task:bad_default:args_validate_with_defaults",
        "task:global_random:task_sample_is_deterministic",
        "task:missing_field:task_rows_have_the_fields",
        "task:narrow_alphabet:task_alphabet_covers_the_rows",
        "task:short_budget:task_response_budget_fits_the_answers",
    ]
    # The bad default stops what depends on it, with one reason.
    assert outcomes["task:bad_default:task_sample_is_deterministic"] == "SKIPPED"
    assert outcomes["task:bad_default:builds_without_gpu"] == "SKIPPED"
    # Held-out rows come from sample() by default: a task whose sample fails is not failed twice.
    assert outcomes["task:global_random:task_eval_rows"] == "SKIPPED"
    assert outcomes["task:missing_field:task_eval_rows"] == "SKIPPED"
    out = result.stdout.str()
    assert "precondition 'args_validate_with_defaults' failed: see that check" in out
    assert "draw every random choice from the `generator` argument" in out
    assert "row 0 lacks the declared fields ['difficulty']" in out
    assert "has characters ['+'] that alphabet() ('0123456789=') lacks" in out
    assert "but max_response_tokens() is 1" in out
