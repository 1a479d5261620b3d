"""The "informative group" selection of the POLARIS add strategies, vectorized in float64.

A group is the experiences sharing ``eid.tid`` (groups numbered by first appearance, as
:func:`trinity_core.experience.group_by`; :func:`~trinity_core.batch.gather_group_codes`). A group is
**informative** when it has at least two members and the population variance of its rewards exceeds
``variance_threshold``:
``var_g = Σ (r_i − μ_g)² / n_g > threshold`` (``np.var`` in the reference). Variances come from
:func:`trinity_core.ops.segment_var`, whose mean is exact for equal rewards, so a group of equal rewards
has variance exactly 0 (numpy's can be a few ulps above 0, which the reference then keeps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trinity_core.batch import gather_group_codes
from trinity_core.components.reward_check import finite_rewards
from trinity_core.experience import Experience
from trinity_core.ops import segment_count, segment_var

__all__ = ["Informative", "grouped_positions", "informative_groups", "select_informative"]


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


def select_informative(
    experiences: Sequence[Experience], threshold: float, where: str
) -> tuple[list[Experience], Informative]:
    """The experiences of the informative task groups (grouped, first-appearance order) and the groups.

    A missing or non-finite reward is :func:`~trinity_core.components.reward_check.finite_reward`'s
    ``ValueError``, naming ``where`` and the experience.
    """
    rewards = finite_rewards(experiences, where)
    index, num_groups = gather_group_codes(experiences, "task")
    groups = informative_groups(rewards, index, num_groups, threshold)
    kept = [experiences[i] for i in grouped_positions(index, groups.keep[index])]
    return kept, groups
