"""Priority functions of the replay buffer (kind ``priority_fn``): which stored groups are trained on again.

The replay buffer (:mod:`trinity_core.buffer.replay`) keeps task groups the learner has trained on and
mixes some of them into later batches. Before each draw it asks the priority function for one score per
stored group, from :class:`ReplayStats`; the highest scores are drawn (ties: the older group first) and,
when the buffer is full, the lowest are evicted. Scores are computed for all groups at once (vectorized).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from trinity_core.components.base import Component

__all__ = ["PriorityFn", "ReplayStats"]


@dataclass(frozen=True)
class ReplayStats:
    """Per stored group, ``E`` groups; every tensor has shape ``(E,)``.

    Attributes:
        version: the policy version that sampled the group (int64).
        use_count: how many times the group was trained on, its fresh use included (int64).
        reward_mean: the mean reward of its responses (float64).
        reward_var: the population variance of its rewards (float64; 0 for equal rewards).
        seq: insertion order, 0 for the first group the run stored (int64).
        rows: responses in the group (int64).
    """

    version: Tensor
    use_count: Tensor
    reward_mean: Tensor
    reward_var: Tensor
    seq: Tensor
    rows: Tensor

    def __len__(self) -> int:
        return int(self.version.shape[0])


class PriorityFn(Component, ABC):
    """Base of priority functions: ``fn(stats, version) -> (E,) float64`` scores, higher drawn first.

    Example (newest first)::

        class Newest(PriorityFn):
            \"\"\"p = seq.\"\"\"

            def __call__(self, stats, version):
                return stats.seq.double()
    """

    kind: ClassVar[str] = "priority_fn"

    @abstractmethod
    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        """One score per stored group (float64, shape ``(len(stats),)``); ``version`` is the learner's
        current policy version."""
