"""Source templates of ``trinity plugins new`` for the buffer pillar's kinds: task selectors, experience
operators and replay priority functions (placeholders as in :mod:`~trinity_core.cli.scaffold_templates`)."""

from __future__ import annotations

__all__ = ["BUFFER_COMPONENTS"]

BUFFER_COMPONENTS: dict[str, tuple[str, str]] = {
    "task_selector": (
        "Selector",
        '''"""``$name`` task selector."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs, TaskSelector


class $cls(TaskSelector):
    """$name: rows with the lowest mean reward so far first (unseen rows count as 0), ties at random.

    TODO: replace the rule (first line: what it selects) and keep every random number from
    self.generator and everything the choice depends on in state_dict().
    """

    class Args(ComponentArgs):
        momentum: float = Field(0.5, ge=0, lt=1, description="Weight of the old mean in each update.")

    momentum: float

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mean = torch.zeros(self.size, dtype=torch.float64)

    def get_indices(self, batch_size: int) -> torch.Tensor:
        """The ``batch_size`` rows of lowest mean reward (random ties; repeats past ``size``)."""
        noise = torch.rand(self.size, generator=self.generator, dtype=torch.float64) * 1e-9
        order = torch.argsort(self.mean + noise)
        return order.repeat(batch_size // self.size + 1)[:batch_size]

    def update(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """Move each row's mean toward its new mean reward (NaN: no news)."""
        valid = ~torch.isnan(values)
        rows = indices[valid]
        self.mean[rows] = self.momentum * self.mean[rows] + (1 - self.momentum) * values[valid]

    def state_dict(self) -> dict[str, Any]:
        """The means."""
        return {"mean": self.mean.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.mean = torch.as_tensor(state["mean"], dtype=torch.float64).clone()
''',
    ),
    "operator": (
        "Operator",
        '''"""``$name`` experience operator."""

from __future__ import annotations

from pydantic import Field

from trinity_core.batch import ExperienceBatch
from trinity_core.components import ComponentArgs, ExperienceOperator, Metrics


class $cls(ExperienceOperator):
    """$name: keep the responses whose reward is at least ``min_reward`` (a filter).

    TODO: replace the rule. A filter returns batch.select(keep); a mapper returns the batch itself
    (new rewards through trinity_core.batch_rows.replace_rewards).
    """

    class Args(ComponentArgs):
        min_reward: float = Field(0.0, description="Responses scoring less are dropped.")

    min_reward: float

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """The rows with a reward of at least ``min_reward``."""
        keep = batch.has_reward & (batch.rewards >= self.min_reward)
        return batch.select(keep), {"dropped": (~keep).double().sum()}
''',
    ),
    "priority_fn": (
        "Priority",
        '''"""``$name`` replay priority function."""

from __future__ import annotations

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs, PriorityFn, ReplayStats


class $cls(PriorityFn):
    """$name: p = reward_mean − cost · use_count (groups that scored well, not yet reused, first).

    TODO: replace the formula; one float per stored group, from that group's statistics only.
    """

    class Args(ComponentArgs):
        cost: float = Field(0.5, ge=0, description="Priority one use costs.")

    cost: float

    def __call__(self, stats: ReplayStats, version: int) -> torch.Tensor:
        """One score per stored group."""
        return stats.reward_mean - self.cost * stats.use_count.to(torch.float64)
''',
    ),
}
"""Kind -> (class name suffix, module source)."""
