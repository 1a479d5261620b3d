"""Shared machinery of the OPMD and AsymRE group advantages: A_i = r_i − b_{g(i)}, per task group."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from torch import Tensor

from trinity_core.components import GroupAdvantage, Metrics, summarize_metric, write_advantages
from trinity_core.components.reward_check import check_finite_rewards, finite_rewards
from trinity_core.experience import Experience
from trinity_plugin_opmd.kernel import GroupBaselines

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["BaselineGroupAdvantage"]


class BaselineGroupAdvantage(GroupAdvantage):
    """Base of group advantages ``A_i = r_i − b_{g(i)}`` with a per-group baseline ``b`` (abstract).

    Subclasses implement :meth:`baselines`. Both paths (per group and vectorized) call it, so they agree;
    metrics, identical in both: ``group_advantages/reward_mean/{mean,max,min}`` and
    ``group_advantages/group_baseline/{mean,max,min}`` over the groups (singletons included with their
    true values), ``group_advantages/singleton_count/sum``. Missing or non-finite rewards are a
    ``ValueError`` naming the experience.
    """

    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    @abstractmethod
    def baselines(self, rewards: Tensor, index: Tensor, num_groups: int) -> GroupBaselines:
        """The baselines of the ``num_groups`` groups of ``rewards`` ``(N,)`` float64 (``index`` ``(N,)``)."""

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], precomputed_std: Tensor | None = None
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one group; metrics ``reward_mean``, ``group_baseline``, ``singleton_count``."""
        rewards = finite_rewards(exps, f"{type(self).name()} advantage (group {group_id})")
        groups = self.baselines(rewards, torch.zeros(len(exps), dtype=torch.int64), 1)
        write_advantages(exps, groups.advantages(rewards, torch.zeros(len(exps), dtype=torch.int64)))
        metrics: Metrics = {
            "reward_mean": groups.reward_mean[0],
            "group_baseline": groups.baseline[0],
            "singleton_count:sum": int(len(exps) == 1),
        }
        return exps, metrics

    def batch_fields(self) -> tuple[str, ...]:
        """:meth:`process_batch` reads rewards and group indices only: no padded column."""
        return ()

    def batch_group_levels(self) -> tuple[Literal["task", "run", "step"], ...]:
        """Only the ``group_level`` index is read."""
        return (self.group_level,)

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics]:
        """Advantages ``(N,)`` of the whole batch and the summarised per-group metrics."""
        if not batch.rewards_are_finite():  # names the first bad experience
            check_finite_rewards(batch.experiences, f"{type(self).name()} advantage")
        index = batch.group_index[self.group_level]
        groups = self.baselines(batch.rewards, index, batch.num_groups[self.group_level])
        prefix = self.metric_prefix
        metrics = summarize_metric(groups.reward_mean, "reward_mean", prefix)
        metrics.update(summarize_metric(groups.baseline, "group_baseline", prefix))
        metrics[f"{prefix}/singleton_count/sum"] = (groups.count == 1).sum().to(torch.float64)
        return groups.advantages(batch.rewards, index), metrics
