"""``correct_bias`` add strategy: :class:`CorrectBiasAddStrategy` (rank-bias-corrected GRPO)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import (
    ComponentArgs,
    GroupAdvantageStrategy,
    Metrics,
    summarize_metric,
    write_advantages,
)
from trinity_core.components.group_kernels import mean_logprob
from trinity_core.components.reward_check import check_finite_rewards, finite_rewards
from trinity_core.experience import Experience
from trinity_plugin_polaris.rank_bias import rank_bias_scores

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["CorrectBiasAddStrategy", "CorrectBiasArgs"]


class CorrectBiasArgs(ComponentArgs):
    """Arguments of :class:`CorrectBiasAddStrategy` (defaults of the earlier add-strategy API)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the group std of the corrected rewards.")
    rank_penalty: float = Field(
        0.25,
        ge=0,
        le=1,
        description="p in r' = r * (1 - p * rank / n), rank of the masked mean log-prob (0 = least likely).",
    )


def _logprob_rows(exps: Sequence[Experience], where: str) -> tuple[list[Tensor], list[Tensor]]:
    rows, masks = [], []
    for exp in exps:
        if exp.logprobs is None:
            raise ValueError(
                f"{where}: experience {exp.eid.uid} has no logprobs; the rank correction needs the sampling "
                "log-probs: record them in the rollout or use the 'grpo' add strategy"
            )
        rows.append(exp.logprobs)
        masks.append(
            exp.action_mask
            if exp.action_mask is not None
            else torch.ones_like(exp.logprobs, dtype=torch.bool)
        )
    return rows, masks


class CorrectBiasAddStrategy(GroupAdvantageStrategy):
    """Rank-bias correction: GRPO on r' = r * (1 - p * rank / n), rank = likelihood rank in the group.

    Unlikeliness reward (He et al., arXiv:2506.02355): within each task group, a likelier sample
    (higher masked mean log-prob) has its reward shrunk, so rare correct samples gain. Formulas in
    :mod:`trinity_plugin_polaris.rank_bias`: ``A_i = (r'_i − μ'_g) / (σ'_g + ε)`` with the corrected
    reward in the numerator (as the earlier add strategy), float64, ties broken by batch order, log-probs
    averaged over action tokens only. Writes every experience (advantages set, ``returns = advantages``)
    in one ``write`` call, grouped, groups in first-appearance order.

    Policies: singleton groups get advantage 0 (the earlier strategy: ``r/(1+ε)``) and no statistics; a group
    whose *corrected* rewards are equal gets exactly 0. ``zero_variance_policy = "finite"``: a group of equal
    raw rewards ``r ≠ 0`` is not zero-variance after the correction and gets finite non-zero advantages (that
    is the method: it ranks all-correct groups by likelihood). Metrics:
    ``group_advantages/reward_mean|reward_std/{mean,max,min}`` of ``r'`` over non-singleton groups and
    ``group_advantages/singleton_count/sum``.
    """

    Args: ClassVar[type[ComponentArgs]] = CorrectBiasArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2506.02355"
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"
    zero_variance_policy: ClassVar[str] = "finite"

    epsilon: float
    rank_penalty: float

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience]
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one task group (the readable twin of :meth:`process_batch`)."""
        where = f"add strategy {type(self).name()!r}"
        rewards = finite_rewards(exps, where)
        if len(exps) == 1:
            write_advantages(exps, torch.zeros(1, dtype=torch.float64))
            return exps, {"singleton_count:sum": 1.0}
        rows, masks = _logprob_rows(exps, where)
        means = torch.stack([mean_logprob(lp, m) for lp, m in zip(rows, masks, strict=True)])
        index = torch.zeros(len(exps), dtype=torch.int64)
        scores = rank_bias_scores(rewards, means, index, 1, self.rank_penalty, self.epsilon)
        write_advantages(exps, scores.advantages)
        return exps, {"reward_mean": scores.mean[0], "reward_std": scores.std[0], "singleton_count:sum": 0.0}

    def batch_fields(self) -> tuple[str, ...]:
        """The rank correction reads the log-probs and the action mask."""
        return ("logprobs", "action_mask")

    def batch_group_levels(self) -> tuple[Literal["task", "run", "step"], ...]:
        """Only the ``group_level`` index is read."""
        return (self.group_level,)

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics]:
        """Vectorized advantages of the whole step (same result and metrics as the per-group path)."""
        where = f"add strategy {type(self).name()!r}"
        if not batch.rewards_are_finite():
            check_finite_rewards(batch.experiences, where)
        logprobs = batch.logprobs
        if logprobs is None:
            _logprob_rows(batch.experiences, where)  # names an experience without logprobs
            raise ValueError(f"{where}: the batch has no logprobs; record them in the rollout")
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        level = self.group_level
        index, num_groups = batch.group_index[level], batch.num_groups[level]
        scores = rank_bias_scores(
            batch.rewards, mean_logprob(logprobs, mask), index, num_groups, self.rank_penalty, self.epsilon
        )
        prefix = self.metric_prefix
        metrics: Metrics = {}
        metrics.update(summarize_metric(scores.mean[scores.multi], "reward_mean", prefix))
        metrics.update(summarize_metric(scores.std[scores.multi], "reward_std", prefix))
        metrics[f"{prefix}/singleton_count/sum"] = (~scores.multi).sum().to(torch.float64)
        return scores.advantages, metrics
