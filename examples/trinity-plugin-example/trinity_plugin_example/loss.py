"""``example_clip``: a PPO-style clipped policy loss built from trinity_core.ops."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import LossAggArgs, PolicyLossFn
from trinity_core.ops import clamp_log_ratio


class ExampleClipLoss(PolicyLossFn):
    """Clipped surrogate: L = agg(max(-A r, -A clip(r, 1 - eps, 1 + eps))), r = exp(logp - old_logp)."""

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, lt=1, description="Clip epsilon of the ratio.")

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The aggregated loss and detached metrics (no host sync, masked positions never used)."""
        mask = action_mask.bool()
        ratio = torch.exp(clamp_log_ratio(torch.where(mask, logprob - old_logprob, 0.0)))
        adv = torch.where(mask, advantages, 0.0)
        clipped = ratio.clamp(1 - self.clip_range, 1 + self.clip_range)
        loss = self.aggregate(torch.maximum(-adv * ratio, -adv * clipped), mask)
        return loss, {"pg_loss": loss.detach()}
