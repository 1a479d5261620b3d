"""``duplicate_informative`` add strategy: :class:`DuplicateInformativeAddStrategy` (POLARIS)."""

from __future__ import annotations

from typing import ClassVar

import torch

from trinity_core.components import AddStrategy, ComponentArgs, Metrics
from trinity_core.experience import Experience
from trinity_plugin_polaris.duplicate import refill
from trinity_plugin_polaris.groups import select_informative
from trinity_plugin_polaris.reward_variance import RewardVarianceArgs

__all__ = ["DuplicateInformativeAddStrategy"]


class DuplicateInformativeAddStrategy(AddStrategy):
    """POLARIS: keep task groups with reward variance, then copy them as new groups to restore the step size.

    Selection as ``reward_variance`` (``n_g ≥ 2`` and population variance ``> variance_threshold``,
    float64); then the kept experiences are refilled to exactly the number received with copies of
    the informative groups, each copy a new task group with fresh EIDs
    (:mod:`trinity_plugin_polaris.duplicate`: deterministic, whole groups first, one partial copy at
    most). No advantages are computed (compute them downstream, e.g. in the trainer). Everything is
    written in **one** ``write`` call: the kept groups in first-appearance order, then the copies.
    Nothing is written when no group is informative (as in the seed).

    Returns ``(written, metrics)``: ``written`` is ``len(experiences)`` or 0; metrics
    ``filtered_count`` (experiences dropped), ``duplicated_count`` (copies written),
    ``informative_group_count``, as 0-d tensors. Missing or non-finite rewards are a ``ValueError``.
    """

    Args: ClassVar[type[ComponentArgs]] = RewardVarianceArgs
    paper: ClassVar[str | None] = "https://hkunlp.github.io/blog/2025/Polaris"

    variance_threshold: float

    async def add(self, experiences: list[Experience], step: int) -> tuple[int, Metrics]:
        """Filter by group reward variance, refill with copies, write once."""
        if len(experiences) == 0:
            return 0, {}
        where = f"add strategy {type(self).name()!r}"
        kept, groups = select_informative(experiences, self.variance_threshold, where)
        copies: list[Experience] = []
        if kept:
            by_group: dict[str, list[Experience]] = {}
            for exp in kept:
                by_group.setdefault(exp.eid.tid, []).append(exp)
            taken = {exp.eid.tid for exp in experiences}
            copies = refill(list(by_group.values()), len(experiences) - len(kept), taken)
            await self.writer.write(kept + copies)
        return len(kept) + len(copies), {
            "filtered_count": torch.tensor(len(experiences) - len(kept)),
            "duplicated_count": torch.tensor(len(copies)),
            "informative_group_count": groups.keep.sum(),
        }
