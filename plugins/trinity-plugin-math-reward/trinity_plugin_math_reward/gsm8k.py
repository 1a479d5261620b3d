"""``gsm8k``: 1.0 when the completion's final number equals the reference answer's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity_core.train.data.rewards import Completion, completion_text
from trinity_plugin_math_reward.numbers import final_number

__all__ = ["gsm8k"]


def gsm8k(completions: Sequence[Completion], answer: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion's final number (after ``####``, else the last) equals the reference's.

    Numbers are compared exactly (:func:`~trinity_plugin_math_reward.numbers.final_number`).
    ``answer`` is a GSM8K solution (``... #### 72``) or the number itself (a string or a number). A
    completion cut at the token budget (``truncated``) scores 0.0, as with ``exact_match``; a reference
    without a number is not applicable (None). A completion is a string or TRL's conversational form
    (``[{"role": "assistant", "content": ...}]``).
    """
    truncated = kwargs.get("truncated") or [False] * len(completions)
    scores: list[float | None] = []
    for completion, reference, cut in zip(completions, answer, truncated, strict=True):
        text = completion_text(completion)
        expected = final_number(str(reference))
        if expected is None:
            scores.append(None)
            continue
        scores.append(1.0 if not cut and final_number(text) == expected else 0.0)
    return scores
