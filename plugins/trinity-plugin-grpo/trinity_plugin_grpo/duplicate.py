"""POLARIS-style duplication: refill a filtered batch to its original number of experiences.

POLARIS (https://hkunlp.github.io/blog/2025/Polaris) drops groups without reward variance and repeats
informative samples so the batch keeps its size. Policy implemented here (deterministic, documented):

* the batch had ``target`` experiences and ``K`` survived filtering, ``D = target − K`` are missing;
  nothing happens when ``D = 0`` or ``K = 0`` (an empty result stays empty);
* survivor ``j`` (``0 ≤ j < K``, in output order) is copied ``D // K`` times plus once more when
  ``⌊(j+1)·(D mod K)/K⌋ > ⌊j·(D mod K)/K⌋``: the extra copies are spread evenly over the batch, so every
  survivor is copied ``⌊D/K⌋`` or ``⌈D/K⌉`` times and the result has exactly ``target`` experiences;
* the ``c``-th copy of an experience is placed right after it (the output stays grouped) and gets the
  same ``batch``/``task``/``run``/``step`` (so it stays in its task group) with the fresh suffix
  ``"{suffix}-dup{c}"``: every copy has its own ``uid`` and names its source. Its tensors are cloned
  (never shared with the source) and ``info`` / ``metrics`` are deep copies.

The reference instead deep-copies whole groups chosen at random with replacement, which restores the
number of groups but not of experiences, and keeps the source EIDs, so copies collide on ``uid``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from trinity_core.experience import EID, Experience

__all__ = ["copy_counts", "duplicate_experience", "duplicate_to_count"]


def copy_counts(kept: int, target: int) -> list[int]:
    """How many copies of each of ``kept`` survivors refill the batch to ``target`` (see module doc)."""
    missing = target - kept
    if kept <= 0 or missing <= 0:
        return [0] * max(kept, 0)
    base, rem = divmod(missing, kept)
    return [base + ((j + 1) * rem) // kept - (j * rem) // kept for j in range(kept)]


def _clone(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return copy.deepcopy(value)


def duplicate_experience(exp: Experience, copy_number: int) -> Experience:
    """A copy of ``exp`` with cloned tensors and the suffix ``"{suffix}-dup{copy_number}"``."""
    fields = {name: _clone(value) for name, value in exp.__dict__.items() if name != "eid"}
    eid = exp.eid
    fields["eid"] = EID(
        batch=eid.batch, task=eid.task, run=eid.run, step=eid.step, suffix=f"{eid.suffix}-dup{copy_number}"
    )
    return Experience._restore(fields)


def duplicate_to_count(kept: Sequence[Experience], target: int) -> list[Experience]:
    """``kept`` with copies inserted after their sources until it has ``target`` experiences."""
    out: list[Experience] = []
    for exp, copies in zip(kept, copy_counts(len(kept), target), strict=True):
        out.append(exp)
        out.extend(duplicate_experience(exp, c) for c in range(1, copies + 1))
    return out
