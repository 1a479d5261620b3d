"""``step_wise_grpo`` add strategy: :class:`StepWiseGRPOStrategy` (earlier Trinity-RFT
``trinity.algorithm.add_strategy.step_wise_add_strategy``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field

from trinity_core.components import AddStrategy, ComponentArgs, Metrics, write_advantages
from trinity_core.experience import Experience
from trinity_plugin_multistep.advantage import StepWiseGRPOAdvantageFn

if TYPE_CHECKING:
    from trinity_core.buffer import BufferWriter

__all__ = ["StepWiseGRPOStrategy", "StepWiseGRPOStrategyArgs"]


class StepWiseGRPOStrategyArgs(ComponentArgs):
    """Arguments of :class:`StepWiseGRPOStrategy` (the earlier API's: ``epsilon``, ``enable_step_norm``)."""

    epsilon: float = Field(
        1e-6, ge=0, description="Added to the std of the last-step rewards before dividing."
    )
    enable_step_norm: bool = Field(
        False, description="Divide each step's advantage by the number of experiences of its run."
    )


class StepWiseGRPOStrategy(AddStrategy):
    """Step-wise GRPO add strategy: last-step GRPO scores broadcast to every step, then one buffer write.

    The older pipeline API of ``step_wise_grpo`` (Trinity-RFT's earlier ``trinity.algorithm.add_strategy``
    module, inspired by rLLM): ``await add(exps, step)`` computes exactly what
    :class:`~trinity_plugin_multistep.advantage.StepWiseGRPOAdvantageFn` computes with
    ``std_cal_level="group"`` and no threshold (float64, the last step chosen by ``eid.step``, single run
    tasks get 0 where the earlier strategy gave ``R/(1+ε)``) and writes every experience through
    ``self.writer`` in **one** ``write`` call, grouped by task (the earlier strategy wrote one call per run).
    Returns ``(number written, metrics)``. The earlier API's helpers :meth:`calculate_group_advantage` and
    :meth:`broadcast_advantages` are kept for code that calls them.
    """

    Args: ClassVar[type[ComponentArgs]] = StepWiseGRPOStrategyArgs

    epsilon: float
    enable_step_norm: bool

    def __init__(self, writer: BufferWriter, **kwargs: Any) -> None:
        """Store ``writer`` and validate ``kwargs`` (``epsilon``, ``enable_step_norm``)."""
        super().__init__(writer, **kwargs)
        self._advantage = StepWiseGRPOAdvantageFn(
            epsilon=self.epsilon, enable_step_norm=self.enable_step_norm
        )

    def calculate_group_advantage(
        self, exps: dict[str, Experience]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Scores of one task from the last step of each run (``{run id: experience}``).

        Returns ``({run id: score}, {"reward_mean": μ, "reward_std": σ})``, ``score = (R − μ)/(σ + ε)``;
        a single run scores 0.
        """
        scores, metrics, _ = self._advantage.run_scores(exps)
        return scores, {
            "reward_mean": float(metrics["reward_mean"]),
            "reward_std": float(metrics["reward_std"]),
        }

    def broadcast_advantages(
        self, run_exps: dict[str, list[Experience]], scores: dict[str, float]
    ) -> dict[str, list[Experience]]:
        """Give every step of run ``rid`` the advantage ``scores[rid] · action_mask`` (``/ len(run)`` with
        ``enable_step_norm``); ``returns`` equal the advantages."""
        for rid, steps in run_exps.items():
            score = scores[rid] / len(steps) if self.enable_step_norm else scores[rid]
            write_advantages(steps, torch.full((len(steps),), score, dtype=torch.float64))
        return run_exps

    async def add(self, experiences: list[Experience], step: int) -> tuple[int, Metrics]:
        """Compute the advantages of one explore step, write them with one call; ``[]`` gives ``(0, {})``."""
        if len(experiences) == 0:
            return 0, {}
        kept, metrics = self._advantage.process(list(experiences))
        if kept:
            await self.writer.write(kept)
        return len(kept), metrics
