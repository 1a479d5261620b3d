"""``math_verify``: answer equivalence with Hugging Face's ``math-verify`` (LaTeX, ``\\boxed{}``, sympy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity_core.train.data.rewards import Completion, completion_text
from trinity_plugin_math_reward.numbers import MARKER

__all__ = ["math_verify"]


def math_verify(
    completions: Sequence[Completion], answer: Sequence[Any], **kwargs: Any
) -> list[float | None]:
    """1.0 when math-verify finds the completion's answer equivalent to the reference, else 0.0.

    The test is ``math_verify.verify(parse(answer), parse(completion))``: ``parse`` finds LaTeX
    (``$\\frac{1}{2}$``, ``\\boxed{0.5}``) and plain expressions; ``verify`` compares them
    symbolically and numerically, so ``\\frac{1}{2}``, ``0.5`` and ``\\boxed{1/2}`` agree. A GSM8K
    reference (``... #### 72``) is read after its ``####``. A reference ``math-verify`` cannot parse is
    not applicable (None); a truncated completion scores 0.0, as with ``exact_match``. A completion is a
    string or TRL's conversational form (``[{"role": "assistant", "content": ...}]``).
    """
    from math_verify import parse, verify

    truncated = kwargs.get("truncated") or [False] * len(completions)
    scores: list[float | None] = []
    for completion, reference, cut in zip(completions, answer, truncated, strict=True):
        text = str(reference)
        gold = parse(text.rsplit(MARKER, 1)[1] if MARKER in text else text)
        if not gold:
            scores.append(None)
            continue
        scores.append(1.0 if not cut and verify(gold, parse(completion_text(completion))) else 0.0)
    return scores
