"""Add strategies (the add-strategy module of earlier Trinity-RFT releases): group, compute, filter, write.

An add strategy receives the experiences of one explore step and decides what reaches the buffer. It
runs once per step outside the loss hot path, so collecting per-group metrics in Python (as the earlier
strategies' ``gather_metrics`` did) is fine here; metrics are still returned as 0-d tensors, materialised
by the caller once per step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from trinity_core.components.advantage import GroupComputation
from trinity_core.components.base import Component, Metrics
from trinity_core.experience import Experience

if TYPE_CHECKING:
    from trinity_core.buffer import BufferWriter

__all__ = ["AddStrategy", "GroupAdvantageStrategy"]


class AddStrategy(Component, ABC):
    """Base of add strategies: ``AddStrategy(writer, **args)`` and ``async add(experiences, step)``.

    ``writer`` is a :class:`~trinity_core.buffer.BufferWriter`; the strategy writes the experiences it
    keeps through it and returns how many it wrote, with metrics.
    """

    kind: ClassVar[str] = "add_strategy"

    def __init__(self, writer: BufferWriter, **kwargs: Any) -> None:
        self.writer = writer
        super().__init__(**kwargs)

    @abstractmethod
    async def add(self, experiences: list[Experience], step: int) -> tuple[int, Metrics]:
        """Process ``experiences`` of explore step ``step`` and write them to the buffer.

        Returns:
            The number of experiences written and a metrics dict.
        """


class GroupAdvantageStrategy(GroupComputation, AddStrategy):
    """An add strategy that computes group advantages, then writes every kept experience.

    Implement ``calculate_group_advantage(group_id, exps)`` (and optionally ``group_experiences`` or
    ``process_batch``, as for :class:`~trinity_core.components.advantage.GroupAdvantage`). ``add``
    writes all kept experiences with **one** ``writer.write`` call, grouped, groups in first-appearance
    order (the earlier strategies wrote one group per call, in no guaranteed order; see
    docs/reference-differences.md, ``add-strategies``).
    """

    async def add(self, experiences: list[Experience], step: int) -> tuple[int, Metrics]:
        """Group, compute, write; return ``(number written, metrics)``; ``[]`` gives ``(0, {})``."""
        if len(experiences) == 0:
            return 0, {}
        kept, metrics = self.process(list(experiences))
        if kept:
            await self.writer.write(kept)
        return len(kept), metrics
