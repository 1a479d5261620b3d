"""POLARIS refill policy: copy informative groups, as new groups, until the step has its size back.

POLARIS (https://hkunlp.github.io/blog/2025/Polaris) drops task groups without reward variance and
repeats informative ones so the batch keeps its size. The policy here is deterministic:

1. ``D = target − K`` experiences are missing (``K`` kept). Passes over the informative groups in
   first-appearance order copy every **whole** group that still fits (``n_g ≤`` what is missing), until
   a pass copies nothing.
2. If ``0 < rest`` experiences are still missing (only possible with unequal group sizes; then ``rest``
   is smaller than every group), the first informative group is copied **partially**: ``rest`` members
   taken extremes first (highest reward, lowest, second highest, second lowest, …; ties by position),
   so a partial copy of two or more members keeps the group's spread of rewards. A partial copy of one
   member is a singleton group.
3. Every copy is a **new task group**: its members get ``task = "{task}-dup{c}"`` (``c`` = how many
   copies of that group exist so far, from 1), made unique against every task id of the step (a ``.k``
   suffix is added on collision), with ``batch``/``run``/``step``/``suffix`` unchanged; so each copy
   has its own ``tid`` and every member its own ``uid``, and works for integer and string task ids.
   Tensors are cloned and ``info``/``metrics`` deep-copied.

The result has exactly ``target`` experiences. The earlier add strategy copied whole groups only (first pass
in reverse order, then random order), so it could overshoot the target, offset integer task ids (a
``TypeError`` for string ids); trinity-rft 0.6.0 samples groups with replacement and keeps the source EIDs, so
copies merge into their source group downstream.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from trinity_core.experience import EID, Experience

__all__ = ["copy_plan", "extremes_first", "fresh_task", "refill"]


def copy_plan(sizes: Sequence[int], missing: int) -> list[tuple[int, int]]:
    """``(group, members)`` of each copy, in order, for groups of ``sizes`` and ``missing`` experiences."""
    plan: list[tuple[int, int]] = []
    rest = missing
    copied = True
    while rest > 0 and copied:
        copied = False
        for group, size in enumerate(sizes):
            if 0 < size <= rest:
                plan.append((group, size))
                rest -= size
                copied = True
    if rest > 0 and sizes:
        plan.append((0, rest))
    return plan


def extremes_first(rewards: Sequence[float]) -> list[int]:
    """Member positions ordered highest, lowest, second highest, second lowest, … (ties by position)."""
    ascending = sorted(range(len(rewards)), key=lambda i: (rewards[i], i))
    descending = sorted(range(len(rewards)), key=lambda i: (-rewards[i], i))
    out: list[int] = []
    for high, low in zip(descending, ascending, strict=True):
        for i in (high, low):
            if i not in out:
                out.append(i)
    return out[: len(rewards)]


def fresh_task(eid: EID, copy_number: int, taken: set[str]) -> str:
    """``"{task}-dup{c}"`` (``.k`` appended while its ``tid`` is in ``taken``); adds the new ``tid``."""
    base = f"{eid.task}-dup{copy_number}"
    task, k = base, 0
    while EID(batch=eid.batch, task=task).tid in taken:
        k += 1
        task = f"{base}.{k}"
    taken.add(EID(batch=eid.batch, task=task).tid)
    return task


def _clone(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.clone()
    return copy.deepcopy(value)


def _copy(exp: Experience, task: str) -> Experience:
    fields = {name: _clone(value) for name, value in exp.__dict__.items() if name != "eid"}
    e = exp.eid
    fields["eid"] = EID(batch=e.batch, task=task, run=e.run, step=e.step, suffix=e.suffix)
    return Experience._restore(fields)


def refill(groups: Sequence[Sequence[Experience]], missing: int, taken: set[str]) -> list[Experience]:
    """The copies of the module policy for the informative ``groups`` (each in batch order).

    ``taken`` holds every ``tid`` of the step; the new ones are added to it.
    """
    copies_made = [0] * len(groups)
    out: list[Experience] = []
    for group, members in copy_plan([len(g) for g in groups], missing):
        source = groups[group]
        copies_made[group] += 1
        task = fresh_task(source[0].eid, copies_made[group], taken)
        if members == len(source):
            chosen = list(range(len(source)))
        else:
            chosen = sorted(extremes_first([float(e.reward or 0.0) for e in source])[:members])
        out.extend(_copy(source[i], task) for i in chosen)
    return out
