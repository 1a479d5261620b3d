"""``example_trainer``: a mean-baseline advantage computed in the trainer on the columnar batch."""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.components import TrainerAdvantage
from trinity_core.ops import group_stats, masked_sum


class ExampleTrainerAdvantage(TrainerAdvantage):
    """Mean baseline: A_i = s_i - mean_g(s), s_i = sum of response i's token scores, on every token."""

    def compute(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``(advantages, returns, metrics)``, ``(N, R)`` tensors and 0-d metrics."""
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        scores = masked_sum(batch.token_level_scores().double(), batch.response_mask.bool(), dim=-1)
        index = batch.group_index["task"].to(scores.device)
        stats = group_stats(scores, index, batch.num_groups["task"])
        per_response = scores - stats.mean[index]
        advantages = per_response[:, None].expand(mask.shape).float()
        return advantages, advantages.clone(), {"score_mean": scores.mean()}
