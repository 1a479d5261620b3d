"""Reward functions are called the way TRL calls them: keywords only, columns by name."""

from __future__ import annotations

from typing import Any

from trinity_core.train import exact_match
from trinity_core.train.data.rewards import combine_rewards, required_fields


def trl_style(completions: list[str], **kwargs: Any) -> list[float]:
    """A TRL reward function: only ``completions`` named, everything else in ``kwargs``."""
    return [float(len(c)) for c in completions]


def test_functions_get_keywords_columns_and_completion_ids() -> None:
    seen: dict[str, Any] = {}

    def keyword_only(
        *, prompts: list[str], completion_ids: list[list[int]], level: list[int], **kw: Any
    ) -> list[float]:
        seen.update(prompts=prompts, completion_ids=completion_ids, level=level, kw=kw)
        return [1.0] * len(prompts)

    assert required_fields(keyword_only) == ["level"]  # the trainer's own arguments are not fields
    got = combine_rewards(
        [trl_style, keyword_only, exact_match],
        [1.0, 1.0, 1.0],
        ["trl", "kw", "exact"],
        ["a=", "b="],
        ["ab", "b"],
        {"level": [1, 2], "answer": ["ab", "x"], "truncated": [False, False]},
        completion_ids=[(5, 6), (6,)],
    )
    assert got == [2.0 + 1.0 + 1.0, 1.0 + 1.0 + 0.0]
    assert seen["completion_ids"] == [[5, 6], [6]]
    assert seen["level"] == [1, 2]
    assert set(seen["kw"]) == {"completions", "answer", "truncated"}


def test_completion_ids_are_left_out_when_not_given() -> None:
    def needs_no_ids(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        assert "completion_ids" not in kwargs
        return [0.5] * len(completions)

    assert combine_rewards([needs_no_ids], [2.0], ["n"], ["p"], ["c"], {}) == [1.0]
