"""``duplicate_informative`` add strategy: :class:`DuplicateInformativeAddStrategy` (POLARIS)."""

from __future__ import annotations

from typing import ClassVar

from trinity_core.experience import Experience
from trinity_plugin_polaris.duplicate import refill
from trinity_plugin_polaris.reward_variance import RewardVarianceAddStrategy

__all__ = ["DuplicateInformativeAddStrategy"]


class DuplicateInformativeAddStrategy(RewardVarianceAddStrategy):
    """POLARIS: keep task groups with reward variance, then copy them as new groups to restore the step size.

    Selection as ``reward_variance`` (``n_g ≥ 2`` and population variance ``> variance_threshold``,
    float64); then the kept experiences are refilled to exactly the number received with copies of
    the informative groups, each copy a new task group with fresh EIDs
    (:mod:`trinity_plugin_polaris.duplicate`: deterministic, whole groups first, one partial copy at
    most). No advantages are computed (compute them downstream, e.g. in the trainer). Everything is
    written in **one** ``write`` call: the kept groups in first-appearance order, then the copies.
    Nothing is written when no group is informative (as in the earlier strategy).

    Returns ``(written, metrics)``: ``written`` is ``len(experiences)`` or 0; metrics
    ``filtered_count`` (experiences dropped), ``duplicated_count`` (copies written),
    ``informative_group_count``, as 0-d tensors. Missing or non-finite rewards are a ``ValueError``.
    """

    paper: ClassVar[str | None] = "https://hkunlp.github.io/blog/2025/Polaris"

    def copies(self, kept: list[Experience], experiences: list[Experience]) -> list[Experience]:
        """Copies of the informative groups that refill ``kept`` to ``len(experiences)`` (none if empty)."""
        if not kept:
            return []
        by_group: dict[str, list[Experience]] = {}
        for exp in kept:
            by_group.setdefault(exp.eid.tid, []).append(exp)
        taken = {exp.eid.tid for exp in experiences}
        return refill(list(by_group.values()), len(experiences) - len(kept), taken)
