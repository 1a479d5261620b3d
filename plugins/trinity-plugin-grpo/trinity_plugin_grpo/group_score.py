"""Shared machinery of the pipeline-side group baselines (``dr_grpo``, ``opo``, ``gpg``, ``grpo_passk``).

:class:`GroupScoreAdvantage` turns a vectorized kernel (:mod:`trinity_plugin_grpo.baselines`) into a
:class:`~trinity_core.components.GroupAdvantage` with both paths:

* :meth:`~GroupScoreAdvantage.process_batch` runs the kernel once over the whole
  :class:`~trinity_core.batch.ExperienceBatch`;
* :meth:`~GroupScoreAdvantage.calculate_group_advantage` (trinity-rft's per-group API) runs the same kernel
  on one group, so the conformance kit's comparison checks the batch indexing against single groups.

Batch-level quantities (GPG's ``α``) come from :meth:`~GroupScoreAdvantage.batch_context`, computed
over every experience of the call on both paths. Metrics (identical on both paths):
``group_advantages/reward_mean/{mean,max,min}`` over groups with at least two members (0 when there are
none), ``group_advantages/singleton_count`` and one ``group_advantages/{name}`` per context entry.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from torch import Tensor

from trinity_core.components import GroupAdvantage, Metrics, summarize_masked_metric, write_advantages
from trinity_core.components.group_metrics import GROUP_PREFIX as PREFIX
from trinity_core.components.reward_check import check_finite_rewards, finite_rewards
from trinity_core.experience import Experience
from trinity_plugin_grpo.baselines import GroupScores

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["GroupScoreAdvantage", "group_score_metrics", "response_token_counts"]


def response_token_counts(exps: list[Experience]) -> Tensor:
    """``(N,)`` int64 number of action tokens per experience (response length without an action mask)."""
    counts = [
        e.action_mask.sum() if e.action_mask is not None else torch.tensor(max(e.response_length, 0))
        for e in exps
    ]
    return torch.stack(counts).to(torch.int64) if counts else torch.zeros(0, dtype=torch.int64)


def group_score_metrics(
    group_mean: Tensor, group_valid: Tensor, singleton_count: Tensor, context: Mapping[str, Tensor]
) -> Metrics:
    """The metric dict described in the module docstring."""
    metrics: Metrics = summarize_masked_metric(group_mean, group_valid, "reward_mean", PREFIX)
    metrics[f"{PREFIX}/singleton_count"] = singleton_count
    for name, value in context.items():
        metrics[f"{PREFIX}/{name}"] = value.detach().to(torch.float64)
    return metrics


class GroupScoreAdvantage(GroupAdvantage):
    """Base of group baselines computed by one vectorized kernel on both paths (see the module doc).

    Subclasses implement :meth:`group_scores` and may override :meth:`batch_context`. Rewards must be
    finite: a missing, NaN or infinite reward is a ``ValueError`` naming the experience.
    """

    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    @abstractmethod
    def group_scores(
        self,
        rewards: Tensor,
        lengths: Tensor,
        index: Tensor,
        num_groups: int,
        context: Mapping[str, Tensor],
    ) -> GroupScores:
        """Scores of every experience: ``rewards`` ``(N,)``, ``lengths`` ``(N,)`` action-token counts,
        ``index`` ``(N,)`` group ids, ``context`` from :meth:`batch_context`."""

    def batch_context(self, rewards: Tensor, lengths: Tensor) -> dict[str, Tensor]:
        """0-d statistics of the whole call (all groups), reported as metrics; none by default."""
        return {}

    def _where(self) -> str:
        return f"{type(self).name()} advantage"

    def _rewards(self, exps: Sequence[Experience]) -> Tensor:
        return finite_rewards(exps, self._where())

    # ------------------------------------------------------------------ per group (trinity-rft API)

    def score_group(
        self, exps: list[Experience], context: Mapping[str, Tensor] | None = None
    ) -> tuple[GroupScores, dict[str, Tensor]]:
        """Run the kernel on one group; ``context`` defaults to the group's own batch context."""
        rewards, lengths = self._rewards(exps), response_token_counts(exps)
        ctx = dict(context) if context is not None else self.batch_context(rewards, lengths)
        index = torch.zeros(len(exps), dtype=torch.int64)
        return self.group_scores(rewards, lengths, index, 1, ctx), ctx

    def calculate_group_advantage(
        self,
        group_id: str,
        exps: list[Experience],
        precomputed_std: Tensor | None = None,
        context: Mapping[str, Tensor] | None = None,
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one group, written into ``exps`` (``precomputed_std`` is unused).

        ``context`` carries batch-level statistics (:meth:`batch_context`); without it the group is
        treated as the whole batch. Metrics: ``reward_mean`` (groups of two or more) and
        ``singleton_count``.
        """
        scores, _ = self.score_group(exps, context)
        write_advantages(exps, scores.advantages)
        metrics: Metrics = {"singleton_count": int(len(exps) == 1)}
        if len(exps) > 1:
            metrics["reward_mean"] = scores.group_mean[0]
        return exps, metrics

    def process_per_group(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Group, compute the batch context over all ``exps``, run the kernel per group."""
        if len(exps) == 0:
            return [], {}
        context = self.batch_context(self._rewards(exps), response_token_counts(exps))
        out: list[Experience] = []
        means, valid, singletons = [], [], 0
        for group in self.group_experiences(list(exps)).values():
            scores, _ = self.score_group(group, context)
            write_advantages(group, scores.advantages)
            out.extend(group)
            means.append(scores.group_mean[0])
            valid.append(len(group) > 1)
            singletons += int(len(group) == 1)
        metrics = group_score_metrics(
            torch.stack(means), torch.tensor(valid), torch.tensor(singletons, dtype=torch.int64), context
        )
        return out, metrics

    # ------------------------------------------------------------------ vectorized

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics]:
        """Advantages ``(N,)`` of the whole batch at once, and the metrics (no host synchronisation).

        Rewards are validated from the source experiences (Python floats), never read from tensors.
        """
        if not batch.rewards_are_finite():
            check_finite_rewards(batch.experiences, self._where())
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        lengths = mask.sum(dim=-1)
        level = self.group_level
        index, num_groups = batch.group_index[level], batch.num_groups[level]
        context = self.batch_context(batch.rewards, lengths)
        scores = self.group_scores(batch.rewards, lengths, index, num_groups, context)
        singletons = (~scores.group_valid[index]).sum()
        return scores.advantages, group_score_metrics(
            scores.group_mean, scores.group_valid, singletons, context
        )
