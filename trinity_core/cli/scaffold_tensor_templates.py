"""Source templates of ``trinity plugins new`` for the kinds that compute on a batch's tensors: losses,
advantages and add strategies (placeholders as in :mod:`~trinity_core.cli.scaffold_templates`)."""

from __future__ import annotations

__all__ = ["TENSOR_COMPONENTS"]

TENSOR_COMPONENTS: dict[str, tuple[str, str]] = {
    "policy_loss": (
        "Loss",
        '''"""``$name`` policy loss."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import LossAggArgs, PolicyLossFn


class $cls(PolicyLossFn):
    """$name: L = agg(max(-A r, -A clip(r, 1 - eps, 1 + eps))), r = exp(logp - old_logp).

    TODO: replace this formula (first line: what it computes) and the body with your loss.
    """

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, description="Clip epsilon of the ratio.")

    def __call__(
        self, logprob: torch.Tensor, old_logprob: torch.Tensor, action_mask: torch.Tensor,
        advantages: torch.Tensor, **kwargs: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The aggregated loss and detached metrics."""
        log_ratio = torch.where(action_mask, logprob - old_logprob, 0.0).clamp(-20, 20)
        ratio = torch.exp(log_ratio)
        adv = torch.where(action_mask, advantages, 0.0)
        clipped = ratio.clamp(1 - self.clip_range, 1 + self.clip_range)
        loss = self.aggregate(torch.maximum(-adv * ratio, -adv * clipped), action_mask)
        return loss, {"pg_loss": loss.detach()}
''',
    ),
    "advantage_fn": (
        "Advantage",
        '''"""``$name`` group advantage."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs, GroupAdvantage, summarize_metric, write_advantages
from trinity_core.ops import group_stats


def _advantages(rewards: torch.Tensor, index: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    stats = group_stats(rewards, index, groups)
    std = stats.std_unbiased[index]
    dev = rewards - stats.mean[index]
    return torch.where(std > 0, dev / (std + eps), torch.zeros_like(dev))


class $cls(GroupAdvantage):
    """$name: A_i = (r_i - mean_g(r)) / (std_g(r) + eps) over the responses to one task; 0 if std is 0.

    TODO: replace this formula (first line: what it computes) and the body with your advantage.
    """

    class Args(ComponentArgs):
        epsilon: float = Field(1e-6, gt=0, description="Added to the group std.")

    def calculate_group_advantage(self, group_id: Any, exps: Any, precomputed_std: Any = None) -> Any:
        """One group: write each experience's advantage."""
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        adv = _advantages(rewards, torch.zeros(len(exps), dtype=torch.int64), 1, self.epsilon)
        write_advantages(exps, adv)
        return exps, {"reward_mean": rewards.mean()}

    def process_batch(self, batch: Any) -> Any:
        """Every group at once (vectorised; statistics in float64)."""
        index, groups = batch.group_index["task"], batch.num_groups["task"]
        adv = _advantages(batch.rewards, index, groups, self.epsilon)
        means = group_stats(batch.rewards, index, groups).mean
        return adv, summarize_metric(means, "reward_mean", self.metric_prefix)
''',
    ),
    "add_strategy": (
        "Strategy",
        '''"""``$name`` add strategy."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs, GroupAdvantageStrategy, write_advantages
from trinity_core.ops import group_stats


class $cls(GroupAdvantageStrategy):
    """$name: A_i = s (r_i - mean_g(r)), written with the group to the buffer.

    TODO: replace this formula (first line: what it computes) and the body with your strategy.
    """

    class Args(ComponentArgs):
        scale: float = Field(1.0, gt=0, description="Multiplies the advantages.")

    def calculate_group_advantage(self, group_id: Any, exps: Any) -> Any:
        """One group: write each experience's advantage."""
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        stats = group_stats(rewards, torch.zeros(len(exps), dtype=torch.int64), 1)
        write_advantages(exps, (rewards - stats.mean[0]) * self.scale)
        return exps, {}
''',
    ),
    "kl_fn": (
        "KL",
        '''"""``$name`` KL estimator."""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.components import KLFn


class $cls(KLFn):
    """$name: k = 0.5 (logp - ref_logp)^2 per token (masked positions neutralised first).

    TODO: replace this formula (first line: what it computes) and the body with your estimator.
    """

    def calculate_kl(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, old_logprob: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-token estimate."""
        return 0.5 * (logprob - ref_logprob).square()

    def calculate_kl_loss(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, response_mask: torch.Tensor,
        loss_agg_mode: Any = None, old_logprob: Any = None, loss_scale: Any = None,
    ) -> Any:
        """The aggregated loss; masked positions never reach the estimator (no NaN leaks)."""
        m = response_mask.bool()
        return super().calculate_kl_loss(
            torch.where(m, logprob, 0.0), torch.where(m, ref_logprob, 0.0), response_mask, loss_agg_mode,
            old_logprob, loss_scale,
        )
''',
    ),
    "entropy_loss": (
        "Entropy",
        '''"""``$name`` entropy term."""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.components import EntropyLossFn


class $cls(EntropyLossFn):
    """$name: entropy_coef * agg(H, action_mask); the trainer subtracts it from the loss.

    TODO: replace this formula (first line: what it computes) and the body with your term.
    """

    def __call__(
        self, entropy: torch.Tensor, action_mask: torch.Tensor, **kwargs: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The weighted term and its detached value."""
        value = self.aggregate(entropy, action_mask)
        return value * self.entropy_coef, {"entropy_loss": value.detach()}
''',
    ),
    "value_loss": (
        "ValueLoss",
        '''"""``$name`` value loss."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ValueLossFn


class $cls(ValueLossFn):
    """$name: agg(huber_d(V - G)), huber_d(e) = e^2 / 2 where |e| <= d, else d (|e| - d / 2).

    ``V`` are the critic's predictions, ``G`` the returns. TODO: replace this formula (first line: what
    it computes) and the body with your value loss.
    """

    class Args(ValueLossFn.Args):
        delta: float = Field(1.0, gt=0, description="Error beyond which the loss grows linearly.")

    delta: float

    def __call__(
        self, vpreds: torch.Tensor, values: torch.Tensor, returns: torch.Tensor, action_mask: torch.Tensor,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The aggregated loss and detached metrics."""
        mask = action_mask.bool()
        err = torch.where(mask, vpreds - returns, 0.0)  # masked positions may hold NaN
        size = err.abs()
        huber = torch.where(size <= self.delta, 0.5 * err.square(), self.delta * (size - 0.5 * self.delta))
        loss = self.aggregate(huber, mask)
        return loss, {"vf_loss": loss.detach()}
''',
    ),
}
"""Kind -> (class name suffix, module source)."""
