"""``opmd`` add strategy: :class:`OPMDAddStrategy` (the earlier add-strategy API's ``OPMDAddStrategy``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from torch import Tensor

from trinity_core.components import ComponentArgs, GroupAdvantageStrategy, Metrics
from trinity_core.experience import Experience
from trinity_plugin_opmd.opmd_advantage import OPMDArgs, OPMDGroupAdvantage

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch
    from trinity_core.buffer import BufferWriter

__all__ = ["OPMDAddStrategy"]


class OPMDAddStrategy(GroupAdvantageStrategy):
    """OPMD add strategy: A_i = r_i − b_g per task group (mean or log-avg-exp), then one buffer write.

    The older pipeline API of OPMD (Trinity-RFT's earlier ``trinity.algorithm.add_strategy`` module):
    ``OPMDAddStrategy(writer, opmd_baseline="mean", tau=1.0)``; ``await strategy.add(experiences, step)``
    computes exactly what :class:`~trinity_plugin_opmd.opmd_advantage.OPMDGroupAdvantage` computes (same
    policies: singletons and zero-variance groups get 0) and writes every experience through ``self.writer``
    in **one** ``write`` call, grouped, groups in first-appearance order. Returns ``(number written,
    metrics)``.

    The metric ``group_advantages/group_baseline/{mean,max,min}`` is reported: the earlier strategy
    produced it as a tensor, which its pandas-based metric gathering silently dropped.
    """

    Args: ClassVar[type[ComponentArgs]] = OPMDArgs
    paper: ClassVar[str | None] = OPMDGroupAdvantage.paper

    opmd_baseline: Literal["mean", "logavgexp"]
    tau: float

    def __init__(self, writer: BufferWriter, **kwargs: Any) -> None:
        """Store ``writer`` and validate ``kwargs`` (``opmd_baseline``, ``tau``)."""
        super().__init__(writer, **kwargs)
        self._advantage = OPMDGroupAdvantage(opmd_baseline=self.opmd_baseline, tau=self.tau)

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience]
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one task group (:meth:`OPMDGroupAdvantage.calculate_group_advantage`)."""
        return self._advantage.calculate_group_advantage(group_id, exps)

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics]:
        """Vectorized advantages of the whole step (:meth:`OPMDGroupAdvantage.process_batch`)."""
        return self._advantage.process_batch(batch)

    def batch_fields(self) -> tuple[str, ...]:
        """The columns :meth:`process_batch` reads: none (rewards and the task index only)."""
        return self._advantage.batch_fields()

    def batch_group_levels(self) -> tuple[Literal["task", "run", "step"], ...]:
        """Only the task index is read."""
        return self._advantage.batch_group_levels()
