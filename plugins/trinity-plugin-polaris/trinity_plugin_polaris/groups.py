"""Task groups of one explore step and the "informative group" test, vectorized in float64.

A group is the experiences sharing ``eid.tid`` (groups numbered by first appearance, as
:func:`trinity_core.experience.group_by`). A group is **informative** when it has at least two members
and the population variance of its rewards exceeds ``variance_threshold``:
``var_g = Σ (r_i − μ_g)² / n_g > threshold`` (``np.var`` in the reference). Variances come from
:func:`trinity_core.ops.segment_var`, whose mean is exact for equal rewards, so a group of equal rewards
has variance exactly 0 (numpy's can be a few ulps above 0, which the reference then keeps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trinity_core.experience import Experience
from trinity_core.ops import segment_count, segment_var

__all__ = ["Informative", "finite_rewards", "grouped_positions", "informative_groups", "task_groups"]


def finite_rewards(exps: Sequence[Experience], where: str) -> Tensor:
    """``(N,)`` float64 rewards; a ValueError naming the first experience without a finite reward."""
    values = [exp.reward for exp in exps]
    for exp, reward in zip(exps, values, strict=True):
        if reward is None or not math.isfinite(reward):
            raise ValueError(
                f"{where}: experience {exp.eid.uid} has reward {reward!r}; every experience needs a finite "
                "reward: score it with the reward function or filter it out first"
            )
    return torch.tensor(values, dtype=torch.float64)


def task_groups(exps: Sequence[Experience]) -> tuple[Tensor, int]:
    """``(index, num_groups)``: ``(N,)`` int64 task-group id of each experience (first appearance)."""
    ids: dict[str, int] = {}
    index = [ids.setdefault(exp.eid.tid, len(ids)) for exp in exps]
    return torch.tensor(index, dtype=torch.int64), len(ids)


@dataclass(frozen=True, eq=False)
class Informative:
    """Per-group result of :func:`informative_groups` (all ``(num_groups,)``)."""

    keep: Tensor
    """bool: the group is informative."""
    variance: Tensor
    """float64 population variance of the rewards (0 for singletons)."""
    count: Tensor
    """int64 members."""


def informative_groups(rewards: Tensor, index: Tensor, num_groups: int, threshold: float) -> Informative:
    """Which groups have ``n_g ≥ 2`` and ``var_g > threshold`` (module docstring)."""
    count = segment_count(index, num_groups)
    variance = segment_var(rewards, index, num_groups, unbiased=False)
    return Informative(keep=(count >= 2) & (variance > threshold), variance=variance, count=count)


def grouped_positions(index: Tensor, keep: Tensor) -> list[int]:
    """Positions of the kept experiences, grouped (groups in first-appearance order), stable within."""
    order = torch.argsort(index, stable=True)
    return [int(i) for i in order[keep[order]]]
