"""``grpo`` advantage function: :class:`GRPOGroupedAdvantage` (trinity-rft's ``grpo``)."""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.batch import gather_group_codes
from trinity_core.components import (
    ComponentArgs,
    GroupAdvantage,
    GroupComputation,
    Metrics,
    grouped_order,
    write_advantages,
)
from trinity_core.components.group_kernels import ZERO_STD_RTOL, mean_logprob
from trinity_core.components.reward_check import check_finite_rewards, finite_reward, finite_rewards
from trinity_core.experience import Experience
from trinity_core.ops import group_stats
from trinity_plugin_grpo.duplicate import duplicate_to_count
from trinity_plugin_grpo.kernel import grpo_scores
from trinity_plugin_grpo.metrics import grpo_metrics

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["GRPOArgs", "GRPOGroupedAdvantage"]


class GRPOArgs(ComponentArgs):
    """Arguments of :class:`GRPOGroupedAdvantage` (defaults are the earlier API's ``default_args()``)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the standard deviation before dividing.")
    std_threshold: float | None = Field(
        None,
        ge=0,
        description=(
            "Drop groups whose reward std (unbiased, of the rank-corrected rewards) is <= this value, "
            "and singleton groups; None keeps every group."
        ),
    )
    duplicate_experiences: bool = Field(
        False,
        description=(
            "POLARIS: after std_threshold dropped experiences, copy survivors (fresh EID suffixes) until "
            "the original number of experiences is restored. No effect without std_threshold."
        ),
    )
    rank_penalty: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "Unlikeliness correction p (arXiv 2506.02355): r' = r * (1 - p * rank / n), rank of the "
            "masked mean log-prob in the group (0 = least likely). Needs logprobs. None disables it."
        ),
    )
    std_cal_level: Literal["group", "batch"] = Field(
        "group",
        description=(
            "Std used as divisor: 'group' (each group's std) or 'batch' (std over all experiences of "
            "non-singleton groups, arXiv 2508.08221). The mean is always the group's."
        ),
    )


_EXPERIENCE_TYPE = attrgetter("experience_type")


def _masked_mean_logprob(exp: Experience, where: str) -> float:
    if exp.logprobs is None:
        raise ValueError(
            f"{where}: rank_penalty needs logprobs but experience {exp.eid.uid} has none; record the "
            "sampling log-probs in the rollout or unset rank_penalty"
        )
    lp = exp.logprobs.to(torch.float64)
    mask = exp.action_mask if exp.action_mask is not None else torch.ones_like(lp, dtype=torch.bool)
    selected = torch.where(mask, lp, 0.0)
    return float(selected.sum() / max(int(mask.sum()), 1))


class GRPOGroupedAdvantage(GroupAdvantage):
    """GRPO: group-relative advantages A_i = (r_i - mean_g(r)) / (std_g(r) + epsilon) over task groups.

    Group-relative policy optimisation (Shao et al., *DeepSeekMath*, arXiv:2402.03300): each task's
    rollouts form a group (EID level ``task``, ``eid.tid``); the advantage of rollout ``i`` of group ``g``
    with ``n_g`` members is

        ``A_i = (r'_i − μ_g) / (σ + ε)``, ``μ_g = mean(r')``, ``σ_g = std_unbiased(r')``,

    broadcast over the response and multiplied by ``action_mask`` (``returns`` = ``advantages``), with
    ``σ = σ_g`` (``std_cal_level="group"``) or ``σ = σ_batch``, the unbiased std of ``r'`` over all
    experiences of non-singleton groups (``"batch"``; group mean, batch std: arXiv:2508.08221). All
    statistics are float64.

    Options:

    * ``rank_penalty = p`` (unlikeliness reward, He et al., arXiv:2506.02355):
      ``r'_i = r_i · (1 − p · k_i / n_g)``, ``k_i`` the rank of the experience's *masked* mean log-prob
      (``action_mask`` tokens only) in its group, 0 = least likely, ties broken by batch order. The
      corrected reward is used in the numerator too (the reference subtracts the corrected mean from the
      raw reward; see docs/reference-differences.md). Without a penalty ``r' = r``.
    * ``std_threshold = t``: drop every experience of a group with ``σ_g ≤ t`` (and every singleton);
      the count is reported as ``filtered_count``.
    * ``duplicate_experiences`` (POLARIS, https://hkunlp.github.io/blog/2025/Polaris; only with
      ``std_threshold``): refill the batch to its original number of experiences with copies of the
      survivors, each copy next to its source, in the same task group, with a fresh suffix
      ``"{suffix}-dup{c}"`` (exact policy: :mod:`trinity_plugin_grpo.duplicate`).

    Policies (differences from trinity-rft 0.6.0; reasons in docs/reference-differences.md):

    * **singleton groups** get advantage exactly 0 (the reference uses the raw reward ``r/(1+ε)``) and
      are excluded from every statistic, ``σ_batch`` and the ``reward_mean``/``reward_std`` metrics; with
      ``std_threshold`` set they are dropped, as in the reference.
    * **zero-variance groups** (``σ_g ≤ 1e-12 · max|r'|``, i.e. equal rewards up to float64 noise) get
      advantage exactly 0; the group mean is computed so that equal values give deviations of exactly 0
      (:mod:`trinity_core.ops.segment`), never ``±1 ulp / ε``.
    * NaN, infinite or missing rewards are rejected with a ``ValueError`` naming the experience.

    Two equivalent paths: :meth:`process_batch` (vectorized over an
    :class:`~trinity_core.batch.ExperienceBatch`, used by :meth:`process`) and trinity-rft's per-group API
    :meth:`calculate_group_advantage` (used by :meth:`process_per_group`). Metrics:
    :mod:`trinity_plugin_grpo.metrics`.
    """

    Args: ClassVar[type[ComponentArgs]] = GRPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2402.03300"
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    epsilon: float
    std_threshold: float | None
    duplicate_experiences: bool
    rank_penalty: float | None
    std_cal_level: Literal["group", "batch"]

    # ------------------------------------------------------------------ per group (trinity-rft API)

    def group_rewards(self, exps: list[Experience]) -> Tensor:
        """The rewards ``r'`` of one group (rank-corrected when ``rank_penalty`` is set), float64."""
        where = f"{type(self).name()} advantage"
        rewards = finite_rewards(exps, where)
        if self.rank_penalty is None or len(exps) < 2:
            return rewards
        lp = [_masked_mean_logprob(e, where) for e in exps]
        ranks = torch.empty(len(exps), dtype=torch.float64)
        for k, i in enumerate(sorted(range(len(exps)), key=lp.__getitem__)):  # sorted() is stable
            ranks[i] = k
        return rewards * (1.0 - self.rank_penalty * ranks / len(exps))

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], precomputed_std: Tensor | float | None = None
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one group (the readable twin of :meth:`process_batch`).

        ``precomputed_std`` is ``σ_batch``, used as divisor when ``std_cal_level="batch"``. Returns the
        kept experiences (``[]`` when the group is dropped; ``exps`` itself is not modified) and metrics
        ``reward_mean``, ``reward_std`` (non-singleton groups), ``singleton_count`` and
        ``skipped_count``.
        """
        metrics: Metrics = {}
        if len(exps) == 1:
            finite_reward(exps[0], f"{type(self).name()} advantage")
            metrics["singleton_count"] = 1
            if self.std_threshold is not None:
                metrics["skipped_count"] = 1
                return [], metrics
            write_advantages(exps, torch.zeros(1, dtype=torch.float64))
            return exps, metrics
        r = self.group_rewards(exps)
        # ops.group_stats on one group: a mean exact for equal rewards, so their std is exactly 0.
        stats = group_stats(r, torch.zeros(len(exps), dtype=torch.int64), 1)
        mean, std = stats.mean[0], stats.std_unbiased[0]
        metrics["reward_mean"] = mean
        metrics["reward_std"] = std
        if self.std_threshold is not None and std <= self.std_threshold:
            metrics["skipped_count"] = len(exps)
            return [], metrics
        if std <= ZERO_STD_RTOL * r.abs().max():
            scores = torch.zeros_like(r)
        else:
            sigma = std
            if self.std_cal_level == "batch" and precomputed_std is not None:
                sigma = torch.as_tensor(precomputed_std, dtype=torch.float64)
            scores = (r - mean) / (sigma + self.epsilon)
        write_advantages(exps, scores)
        return exps, metrics

    def batch_std(self, groups: dict[str, list[Experience]]) -> Tensor:
        """``σ_batch``: unbiased std of ``r'`` over the experiences of non-singleton groups (0 if < 2)."""
        parts = [self.group_rewards(g) for g in groups.values() if len(g) > 1]
        values = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
        return group_stats(values, torch.zeros(values.shape[0], dtype=torch.int64), 1).std_unbiased[0]

    def process_per_group(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Group, compute ``σ_batch`` if needed, call :meth:`calculate_group_advantage` per group."""
        if len(exps) == 0:
            return [], {}
        groups = self.group_experiences(list(exps))
        precomputed = self.batch_std(groups) if self.std_cal_level == "batch" else None
        out: list[Experience] = []
        means: list[Tensor] = []
        stds: list[Tensor] = []
        singletons = skipped = 0
        for group_id, group in groups.items():
            kept, metrics = self.calculate_group_advantage(group_id, group, precomputed_std=precomputed)
            out.extend(kept)
            if "reward_mean" in metrics:
                means.append(metrics["reward_mean"])
                stds.append(metrics["reward_std"])
            singletons += metrics.get("singleton_count", 0)
            skipped += metrics.get("skipped_count", 0)
        f64 = torch.float64
        metrics = grpo_metrics(
            torch.stack(means) if means else torch.zeros(0, dtype=f64),
            torch.stack(stds) if stds else torch.zeros(0, dtype=f64),
            torch.ones(len(means), dtype=torch.bool),
            torch.tensor(singletons, dtype=torch.int64),
            torch.tensor(skipped, dtype=torch.int64),
            precomputed,
        )
        return self._refill(out, len(exps), metrics)

    # ------------------------------------------------------------------ vectorized

    def batch_fields(self) -> tuple[str, ...]:
        """Padded columns :meth:`process_batch` reads: log-probs and mask with ``rank_penalty``, else none."""
        return ("logprobs", "action_mask") if self.rank_penalty is not None else ()

    def batch_group_levels(self) -> tuple[Literal["task", "run", "step"], ...]:
        """Only the ``group_level`` (``task``) index is read."""
        return (self.group_level,)

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics, Tensor]:
        """Advantages of the whole batch at once: ``(advantages (N,), metrics, keep (N,))``.

        Rewards are validated from the batch's source experiences (Python floats, the values
        ``batch.rewards`` was built from), so nothing here reads a tensor on the host; the numeric part
        is :meth:`scores_from_tensors`.
        """
        where = f"{type(self).name()} advantage"
        if not batch.rewards_are_finite():
            check_finite_rewards(batch.experiences, where)
        logprob_means = None
        if self.rank_penalty is not None:
            if batch.logprobs is None:
                raise ValueError(
                    f"{where}: rank_penalty needs logprobs but the batch has none; record the sampling "
                    "log-probs in the rollout or unset rank_penalty"
                )
            mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
            logprob_means = mean_logprob(batch.logprobs, mask)
        level = self.group_level
        return self.scores_from_tensors(
            batch.rewards, batch.group_index[level], batch.num_groups[level], logprob_means
        )

    def scores_from_tensors(
        self, rewards: Tensor, index: Tensor, num_groups: int, logprob_means: Tensor | None = None
    ) -> tuple[Tensor, Metrics, Tensor]:
        """The numeric core of :meth:`process_batch` on raw tensors (no host synchronisation).

        Args:
            rewards: ``(N,)`` finite rewards.
            index: ``(N,)`` int64 group of each experience in ``[0, num_groups)``.
            num_groups: number of groups.
            logprob_means: ``(N,)`` masked mean log-probs (required with ``rank_penalty``).
        """
        s = grpo_scores(
            rewards,
            index,
            num_groups,
            epsilon=self.epsilon,
            std_threshold=self.std_threshold,
            rank_penalty=self.rank_penalty,
            std_cal_level=self.std_cal_level,
            logprob_means=logprob_means,
        )
        singleton = ~s.group_valid.index_select(0, index)
        metrics = grpo_metrics(
            s.group_mean,
            s.group_std,
            s.group_valid,
            singleton.sum(),
            (~s.keep).sum(),
            s.batch_std if self.std_cal_level == "batch" else None,
        )
        return s.advantages, metrics, s.keep

    def columnar_equivalent(self) -> bool:
        """True unless POLARIS duplication is on (the only thing :meth:`process_vectorized` adds)."""
        cls = type(self)
        return (
            not (self.duplicate_experiences and self.std_threshold is not None)
            and cls.process is GroupComputation.process
            and cls.process_vectorized is GRPOGroupedAdvantage.process_vectorized
            and cls.process_batch is GRPOGroupedAdvantage.process_batch
        )

    def process_vectorized(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """The vectorized path, then POLARIS duplication when enabled.

        Without ``rank_penalty`` only the rewards and the task index
        (:func:`~trinity_core.batch.gather_group_codes`) are read, so no batch is built: they go to
        :meth:`scores_from_tensors`, exactly what :meth:`process_batch` computes. DPO pairs (rejected
        there) and subclasses that override :meth:`process_batch` take the batch path.
        """
        if len(exps) == 0:
            return [], {}
        if (
            self.rank_penalty is not None
            or type(self).process_batch is not GRPOGroupedAdvantage.process_batch  # a subclass's own
            or "dpo" in map(_EXPERIENCE_TYPE, exps)
        ):
            kept, metrics = super().process_vectorized(exps)
            return self._refill(kept, len(exps), metrics)
        exps = list(exps)
        rewards = finite_rewards(exps, f"{type(self).name()} advantage")
        index, num_groups = gather_group_codes(exps, self.group_level)
        advantages, metrics, keep = self.scores_from_tensors(rewards, index, num_groups)
        write_advantages(exps, advantages)
        kept = grouped_order(exps, index, keep if self.std_threshold is not None else None)
        return self._refill(kept, len(exps), metrics)

    # ------------------------------------------------------------------ duplication

    def _refill(
        self, kept: list[Experience], target: int, metrics: Metrics
    ) -> tuple[list[Experience], Metrics]:
        if self.duplicate_experiences and self.std_threshold is not None:
            refilled = duplicate_to_count(kept, target)
            metrics["duplicated_count"] = len(refilled) - len(kept)
            return refilled, metrics
        return kept, metrics
