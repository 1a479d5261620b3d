"""``reasoning_gym_score``: the generator's own ``score_answer`` as a reward function."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["reasoning_gym_score"]


def reasoning_gym_score(
    completions: Sequence[str], entry: Sequence[Mapping[str, Any]], **kwargs: Any
) -> list[float]:
    """``score_answer(completion.strip(), entry)`` of the entry's generator (``metadata.source_dataset``);
    0.0 for a completion cut off before EOS (``truncated``), as ``exact_match`` does."""
    import reasoning_gym

    truncated = kwargs.get("truncated") or [False] * len(completions)
    scores = []
    for completion, item, cut in zip(completions, entry, truncated, strict=True):
        score = reasoning_gym.get_score_answer_fn(item["metadata"]["source_dataset"])
        scores.append(0.0 if cut else float(score(completion.strip(), dict(item))))
    return scores
