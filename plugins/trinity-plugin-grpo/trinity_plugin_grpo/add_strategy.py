"""``grpo`` add strategy: :class:`GRPOAddStrategy` (API of earlier Trinity-RFT releases)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, GroupAdvantageStrategy, Metrics
from trinity_core.experience import Experience
from trinity_plugin_grpo.advantage import GRPOGroupedAdvantage

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch
    from trinity_core.buffer import BufferWriter

__all__ = ["GRPOAddStrategy", "GRPOAddStrategyArgs"]


class GRPOAddStrategyArgs(ComponentArgs):
    """Arguments of :class:`GRPOAddStrategy` (as the earlier add-strategy API: only ``epsilon``)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the group reward std before dividing.")


class GRPOAddStrategy(GroupAdvantageStrategy):
    """GRPO add strategy: A_i = (r_i - mean_g) / (std_g + epsilon) per task group, then one buffer write.

    The older pipeline API of GRPO (Trinity-RFT's earlier ``trinity.algorithm.add_strategy`` module):
    ``await strategy.add(experiences, step)`` computes the
    advantages of one explore step exactly as :class:`~trinity_plugin_grpo.advantage.GRPOGroupedAdvantage`
    with default options (float64 statistics, singleton groups and zero-variance groups get advantage
    exactly 0, where the earlier strategy gave singletons ``r/(1+ε)``) and writes every experience through
    ``self.writer`` in **one** ``write`` call, grouped, groups in first-appearance order. Returns
    ``(number written, metrics)`` with the metrics of :mod:`trinity_plugin_grpo.metrics`.
    """

    Args: ClassVar[type[ComponentArgs]] = GRPOAddStrategyArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2402.03300"

    epsilon: float

    def __init__(self, writer: BufferWriter, **kwargs: Any) -> None:
        """Store ``writer`` and validate ``kwargs`` (``epsilon``)."""
        super().__init__(writer, **kwargs)
        self._advantage = GRPOGroupedAdvantage(epsilon=self.epsilon)

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience]
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one task group (see :meth:`GRPOGroupedAdvantage.calculate_group_advantage`)."""
        return self._advantage.calculate_group_advantage(group_id, exps)

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics, Tensor]:
        """Vectorized advantages of the whole step (see :meth:`GRPOGroupedAdvantage.process_batch`)."""
        return self._advantage.process_batch(batch)

    def process_per_group(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Per-group path with the same metrics as the vectorized one."""
        return self._advantage.process_per_group(exps)

    def process_vectorized(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Vectorized path (what :meth:`add` uses)."""
        return self._advantage.process_vectorized(exps)
