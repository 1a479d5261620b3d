"""Experience replay: task groups the learner trained on, kept and mixed into later batches.

After each learner step's fresh batch is read, the replay buffer draws ``groups_per_step`` stored task
groups — the highest scores of its priority function (:class:`~trinity_core.components.PriorityFn`;
ties: the older group first) — and stores the step's fresh groups. A group is trained on at most
``max_reuse`` times in all (its fresh use included) and is evicted once it was sampled more than
``max_staleness`` policy versions ago; past ``capacity`` groups the lowest scores are evicted. Groups are
kept in the pickle-free wire format (:mod:`trinity_core.codec`), so what is replayed is exactly what a
resumed run, which reads them from the checkpoint, replays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trinity_core.codec import deserialize_many, serialize_many
from trinity_core.components.base import Metrics
from trinity_core.components.faults import call_component
from trinity_core.components.priority_fn import PriorityFn, ReplayStats
from trinity_core.experience import Experience
from trinity_core.registry import PluginContractError

__all__ = ["FifoPriority", "ReplayBuffer"]


class FifoPriority(PriorityFn):
    """p = -seq: the oldest stored group first; a full buffer keeps its oldest groups, as a full queue
    takes no more (with ``max_reuse: 1`` nothing is stored: every experience is trained on once, as
    without replay)."""

    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        """Minus the insertion order."""
        return -stats.seq.to(torch.float64)


@dataclass
class _Entry:
    """One stored task group."""

    payload: bytes
    version: int
    use_count: int
    reward_mean: float
    reward_var: float
    seq: int
    rows: int


def _entry(group: Sequence[Experience], version: int, seq: int) -> _Entry:
    rewards = torch.tensor(
        [math.nan if e.reward is None else float(e.reward) for e in group], dtype=torch.float64
    )
    scored = rewards[~torch.isnan(rewards)]
    mean = float(scored.mean()) if scored.numel() else 0.0
    var = float(((scored - mean) ** 2).mean()) if scored.numel() else 0.0
    return _Entry(serialize_many(list(group)), version, 1, mean, var, seq, len(group))


class ReplayBuffer:
    """The replay buffer of one learner process (see the module docstring).

    Args:
        priority_fn: scores the stored groups.
        groups_per_step: groups drawn per step.
        capacity: groups kept.
        max_reuse: uses per group in all (1: store nothing).
        max_staleness: policy versions after which a group is evicted (None: never).
        label: the priority function in messages (``priority function 'x' (dist 1.0)``).
    """

    def __init__(
        self,
        priority_fn: PriorityFn,
        *,
        groups_per_step: int,
        capacity: int,
        max_reuse: int,
        max_staleness: int | None = None,
        label: str = "",
    ) -> None:
        """An empty buffer."""
        self.priority_fn, self.label = priority_fn, label or f"priority function {priority_fn.name()!r}"
        self.groups_per_step, self.capacity = groups_per_step, capacity
        self.max_reuse, self.max_staleness = max_reuse, max_staleness
        self.entries: list[_Entry] = []
        self.next_seq = 0

    def __len__(self) -> int:
        return len(self.entries)

    def stats(self) -> ReplayStats:
        """The stored groups as :class:`ReplayStats` (insertion order)."""

        def column(name: str, dtype: torch.dtype) -> Tensor:
            return torch.tensor([getattr(e, name) for e in self.entries], dtype=dtype)

        return ReplayStats(
            version=column("version", torch.int64),
            use_count=column("use_count", torch.int64),
            reward_mean=column("reward_mean", torch.float64),
            reward_var=column("reward_var", torch.float64),
            seq=column("seq", torch.int64),
            rows=column("rows", torch.int64),
        )

    def priorities(self, version: int) -> Tensor:
        """The priority function's scores of the stored groups, checked."""
        scores = call_component("priority_fn", self.priority_fn, self.priority_fn, self.stats(), version)
        n = len(self.entries)
        if not isinstance(scores, Tensor) or scores.shape != (n,):
            shape = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
            raise PluginContractError(
                f"{self.label} returned {shape} for {n} stored groups; return one float per group "
                "(shape (E,)): fix the priority function or choose another (buffer.replay.priority_fn)"
            )
        scores = scores.detach().to("cpu", torch.float64)
        if n and not bool(torch.isfinite(scores).all()):
            raise PluginContractError(
                f"{self.label} returned a score that is NaN or infinite; fix the priority function or "
                "choose another (buffer.replay.priority_fn)"
            )
        return scores

    def _evict_stale(self, version: int) -> int:
        if self.max_staleness is None:
            return 0
        before = len(self.entries)
        self.entries = [e for e in self.entries if version - e.version <= self.max_staleness]
        return before - len(self.entries)

    def draw(self, version: int) -> tuple[list[Experience], Metrics]:
        """The groups to train on again at policy version ``version`` (their experiences, highest
        priority first) and the metrics ``buffer/replay/*``."""
        evicted = self._evict_stale(version)
        take = min(self.groups_per_step, len(self.entries))
        chosen: list[_Entry] = []
        if take:
            order = torch.sort(self.priorities(version), descending=True, stable=True).indices[:take].tolist()
            chosen = [self.entries[i] for i in order]
        for entry in chosen:
            entry.use_count += 1
        spent = {id(e) for e in chosen if e.use_count >= self.max_reuse}
        self.entries = [e for e in self.entries if id(e) not in spent]
        drawn = [exp for entry in chosen for exp in deserialize_many(entry.payload)]
        ages = [version - e.version for e in chosen]
        uses = [e.use_count for e in chosen]
        metrics: Metrics = {
            "buffer/replay/drawn_groups": torch.tensor(float(len(chosen)), dtype=torch.float64),
            "buffer/replay/drawn_rows": torch.tensor(float(len(drawn)), dtype=torch.float64),
            "buffer/replay/reuse_mean": torch.tensor(
                sum(uses) / len(uses) if uses else 0.0, dtype=torch.float64
            ),
            "buffer/replay/age_mean": torch.tensor(
                sum(ages) / len(ages) if ages else 0.0, dtype=torch.float64
            ),
            "buffer/replay/evicted_stale": torch.tensor(float(evicted), dtype=torch.float64),
        }
        return drawn, metrics

    def add(self, groups: Sequence[Sequence[Experience]], versions: Sequence[int], version: int) -> Metrics:
        """Store the fresh ``groups`` (sampled by policy ``versions``), evicting past ``capacity``;
        returns ``buffer/replay/size`` and ``buffer/replay/evicted_full``."""
        if self.max_reuse > 1:
            for group, sampled in zip(groups, versions, strict=True):
                self.entries.append(_entry(group, int(sampled), self.next_seq))
                self.next_seq += 1
        evicted = max(len(self.entries) - self.capacity, 0)
        if evicted:
            lowest = torch.sort(self.priorities(version), stable=True).indices[:evicted].tolist()
            gone = set(lowest)
            self.entries = [e for i, e in enumerate(self.entries) if i not in gone]
        return {
            "buffer/replay/size": torch.tensor(float(len(self.entries)), dtype=torch.float64),
            "buffer/replay/evicted_full": torch.tensor(float(evicted), dtype=torch.float64),
        }

    def state_dict(self) -> dict[str, Any]:
        """The stored groups (wire-format bytes) with their statistics, and the next insertion number."""
        return {"next_seq": self.next_seq, "entries": [vars(e).copy() for e in self.entries]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.next_seq = int(state["next_seq"])
        self.entries = [_Entry(**entry) for entry in state["entries"]]
