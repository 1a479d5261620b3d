"""``example_exact``: a reward function."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def example_exact(
    prompts: Sequence[str], completions: Sequence[str], answer: Sequence[Any], **kwargs: Any
) -> list[float]:
    """1.0 when the stripped completion equals the answer and the response ended with EOS, else 0.0."""
    truncated = kwargs.get("truncated") or [False] * len(completions)
    return [
        1.0 if not cut and c.strip() == str(a) else 0.0
        for c, a, cut in zip(completions, answer, truncated, strict=True)
    ]
