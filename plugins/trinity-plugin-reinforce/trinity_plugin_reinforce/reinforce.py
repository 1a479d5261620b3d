"""``reinforce`` advantage function: :class:`REINFORCEGroupAdvantage` (pipeline side, no baseline)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from torch import Tensor

from trinity_core.components import GroupAdvantage, Metrics, summarize_metric, write_advantages
from trinity_core.components.reward_check import check_finite_rewards, finite_rewards
from trinity_core.experience import Experience
from trinity_core.ops import group_stats

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["REINFORCEGroupAdvantage"]


class REINFORCEGroupAdvantage(GroupAdvantage):
    """REINFORCE: the advantage is the raw reward, A_i = r_i, broadcast over the response (no baseline).

    Williams (1992). Computed in the experience pipeline; experiences are grouped by task only for the
    metric ``group_advantages/reward_mean/{mean,max,min}`` (the mean reward of each task group, float64).
    ``exp.advantages = r_i · action_mask`` and ``exp.returns`` a copy. Used by TOPR.

    Policies: singletons follow the same formula (``A = r``: there is no baseline to miss);
    ``zero_variance_policy = "finite"``: a group of equal rewards ``v`` gets ``A = v`` (not 0), since
    REINFORCE subtracts nothing. Missing or non-finite rewards are a ``ValueError`` naming the experience.
    """

    paper: ClassVar[str | None] = "https://doi.org/10.1007/BF00992696"
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"
    zero_variance_policy: ClassVar[str] = "finite"

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], precomputed_std: Tensor | None = None
    ) -> tuple[list[Experience], Metrics]:
        """``A_i = r_i`` for each member; metric ``reward_mean`` (the group's mean reward)."""
        rewards = finite_rewards(exps, f"{type(self).name()} advantage (group {group_id})")
        write_advantages(exps, rewards)
        mean = group_stats(rewards, torch.zeros(len(exps), dtype=torch.int64), 1).mean[0]
        return exps, {"reward_mean": mean}

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics]:
        """All advantages at once (``batch.rewards``) and the per-group mean rewards, summarised."""
        if not batch.rewards_are_finite():  # names the first bad experience
            check_finite_rewards(batch.experiences, f"{type(self).name()} advantage")
        level = self.group_level
        stats = group_stats(batch.rewards, batch.group_index[level], batch.num_groups[level])
        return batch.rewards, summarize_metric(stats.mean, "reward_mean", self.metric_prefix)
