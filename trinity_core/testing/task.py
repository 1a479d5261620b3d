"""Checks of task sets (kind ``task``, entry-point group ``trinity_core.tasks``): the rows a run trains and
evaluates on.

A task set is built from its ``Args`` (plus the test's ``args``) like any component and gets the common
checks (documented arguments whose defaults validate, builds without a GPU). Then: every row holds the
declared ``fields`` with ``prompt`` first; ``sample(n, generator)`` depends on the generator only (the
same seeded generator gives the same rows on a fresh instance, whatever the global random state, which is
what makes a run and its resume reproducible); ``eval_rows(n, seed)`` gives at most ``n`` rows with the
fields, the same for the same seed; ``alphabet()`` covers every character of the prompts and answers (the
character tokenizer of the tiny models has no other token); ``max_response_tokens()`` fits every answer
plus EOS.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from trinity_core.testing._core import ConformanceError, Subject, check
from trinity_core.testing.common import BUILT

__all__ = ["ROWS", "ROWS_OK", "SEED"]

ROWS = 6
"""Rows the checks draw per call."""
SEED = 1234
"""Seed of the generators the checks pass to ``sample`` and ``eval_rows``."""

_ROW_FIX = "return a list of dicts, one per row, each with every name of `fields` (prompt first, a str)"


def _rows(subject: Subject, what: str, rows: Any, at_most: int) -> list[dict[str, Any]]:
    """``rows`` checked against the declared fields: a list of at most ``at_most`` dicts holding them."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ConformanceError(f"{what} returned {type(rows).__name__}, not a list of dicts", _ROW_FIX)
    if not rows or len(rows) > at_most:
        raise ConformanceError(f"{what} returned {len(rows)} rows, expected 1 to {at_most}", _ROW_FIX)
    fields = _fields(subject)
    for i, row in enumerate(rows):
        missing = [f for f in fields if f not in row]
        if missing:
            raise ConformanceError(
                f"{what}: row {i} lacks the declared fields {missing} (it has {sorted(row)})", _ROW_FIX
            )
        if not isinstance(row["prompt"], str) or not row["prompt"]:
            raise ConformanceError(
                f"{what}: row {i} has prompt {row['prompt']!r}, not a non-empty str", _ROW_FIX
            )
    return rows


def _fields(subject: Subject) -> tuple[str, ...]:
    fields = subject.build().fields
    if not isinstance(fields, tuple | list) or not fields or fields[0] != "prompt":
        raise ConformanceError(
            f"fields is {fields!r}; it must be a tuple of names with 'prompt' first",
            "declare `fields` as a property returning ('prompt', <the other fields>)",
        )
    return tuple(fields)


def _draw(task: Any, seed: int, global_seed: int) -> list[Any]:
    """Two consecutive ``sample`` calls on one generator seeded ``seed``, the global random state seeded
    ``global_seed`` first (so that rows drawn from it would differ between two draws)."""
    random.seed(global_seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(global_seed)
        generator = torch.Generator().manual_seed(seed)
        return [task.sample(ROWS, generator), task.sample(ROWS, generator)]


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> str | None:
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return f"row {i}: {x!r} vs {y!r}"
    return None


@check("task", requires=BUILT)
def check_task_rows_have_the_fields(subject: Subject) -> None:
    """every sampled row holds the declared fields, prompt first and a non-empty str"""
    _fields(subject)
    _rows(
        subject,
        f"sample({ROWS}, generator)",
        subject.build().sample(ROWS, torch.Generator().manual_seed(SEED)),
        ROWS,
    )


ROWS_OK = (*BUILT, "task_rows_have_the_fields")
"""The precondition of the checks that read rows: rows that lack the declared fields fail once."""


@check("task", requires=ROWS_OK)
def check_task_sample_is_deterministic(subject: Subject) -> None:
    """sample(n, generator) depends only on the generator: two fresh instances give the same rows for the
    same seeded generator, whatever the global random state"""
    first = _draw(subject.build(), SEED, global_seed=1)
    second = _draw(subject.build(), SEED, global_seed=2)
    for call, (a, b) in enumerate(zip(first, second, strict=True), 1):
        diff = _first_difference(a, b) if len(a) == len(b) else f"{len(a)} rows vs {len(b)}"
        if diff is not None:
            raise ConformanceError(
                f"call {call} of sample({ROWS}, generator) on two fresh instances, generators seeded "
                f"{SEED}, differs ({diff}) after the global random state (random, torch) changed",
                "draw every random choice from the `generator` argument (torch.randint(..., "
                "generator=generator)), never from random, numpy or torch's global generator: a run and "
                "its resume must see the same rows",
            )


@check("task", requires=(*ROWS_OK, "task_sample_is_deterministic"))
def check_task_eval_rows(subject: Subject) -> None:
    """eval_rows(n, seed) gives 1 to n rows with the fields, the same on a fresh instance for the same
    seed"""
    rows = _rows(subject, f"eval_rows({ROWS}, {SEED})", subject.build().eval_rows(ROWS, SEED), ROWS)
    again = subject.build().eval_rows(ROWS, SEED)
    diff = _first_difference(rows, again) if len(rows) == len(again) else f"{len(rows)} rows vs {len(again)}"
    if diff is not None:
        raise ConformanceError(
            f"eval_rows({ROWS}, {SEED}) differs between two fresh instances ({diff})",
            "derive held-out rows from `seed` only (e.g. torch.Generator().manual_seed(seed + offset)), "
            "so that evaluations of one run and of its resume are comparable",
        )


def _texts(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(key, row[key]) for row in rows for key in ("prompt", "answer") if isinstance(row.get(key), str)]


@check("task", requires=ROWS_OK)
def check_task_alphabet_covers_the_rows(subject: Subject) -> None:
    """alphabet() holds every character of the prompts and answers of sampled and held-out rows"""
    task = subject.build()
    alphabet = task.alphabet()
    if not isinstance(alphabet, str) or not alphabet:
        raise ConformanceError(f"alphabet() returned {alphabet!r}, not a non-empty str", "return a str")
    rows = task.sample(ROWS, torch.Generator().manual_seed(SEED)) + task.eval_rows(ROWS, SEED)
    known = set(alphabet)
    for key, text in _texts(rows):
        outside = sorted(set(text) - known)
        if outside:
            raise ConformanceError(
                f"the {key} {text!r} has characters {outside} that alphabet() ({alphabet!r}) lacks: the "
                f"character tokenizer of a run would have no token for them",
                "return from alphabet() every character a prompt or answer can contain",
            )


@check("task", requires=ROWS_OK)
def check_task_response_budget_fits_the_answers(subject: Subject) -> None:
    """max_response_tokens() is an int that fits every answer's characters plus EOS"""
    task = subject.build()
    budget = task.max_response_tokens()
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ConformanceError(f"max_response_tokens() returned {budget!r}", "return an int >= 1")
    rows = task.sample(ROWS, torch.Generator().manual_seed(SEED)) + task.eval_rows(ROWS, SEED)
    for _, answer in (t for t in _texts(rows) if t[0] == "answer"):
        if len(answer) + 1 > budget:
            raise ConformanceError(
                f"the answer {answer!r} needs {len(answer) + 1} tokens with EOS (one per character), but "
                f"max_response_tokens() is {budget}: responses would be cut before they can be right",
                "override max_response_tokens() to return the longest answer's length plus 1",
            )
