"""``example_group``: group-normalised advantages in the experience pipeline."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs, GroupAdvantage, summarize_metric, write_advantages
from trinity_core.ops import group_stats


def normalised(rewards: torch.Tensor, index: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """``(r - mean_g) / (std_g + eps)``, 0 in a zero-variance group; float64 group statistics."""
    stats = group_stats(rewards, index, groups)
    std = stats.std_unbiased[index]
    dev = rewards - stats.mean[index]
    return torch.where(std > 0, dev / (std + eps), torch.zeros_like(dev))


class ExampleGroupAdvantage(GroupAdvantage):
    """Group-normalised: A_i = (r_i - mean_g(r)) / (std_g(r) + eps) over the responses to one task."""

    class Args(ComponentArgs):
        epsilon: float = Field(1e-6, gt=0, description="Added to the group std.")

    def calculate_group_advantage(self, group_id: Any, exps: Any, precomputed_std: Any = None) -> Any:
        """One group (the trinity-rft per-group API)."""
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        write_advantages(
            exps, normalised(rewards, torch.zeros(len(exps), dtype=torch.int64), 1, self.epsilon)
        )
        return exps, {"reward_mean": rewards.mean()}

    def process_batch(self, batch: Any) -> Any:
        """Every group at once, vectorised (what the pipeline calls)."""
        index, groups = batch.group_index["task"], batch.num_groups["task"]
        means = group_stats(batch.rewards, index, groups).mean
        adv = normalised(batch.rewards, index, groups, self.epsilon)
        return adv, summarize_metric(means, "reward_mean", self.metric_prefix)
