"""``rec`` advantage function: :class:`RECGroupedAdvantage` (reference ``trinity.algorithm.advantage_fn``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, GroupAdvantage, Metrics, write_advantages
from trinity_core.components.group_metrics import metric_column, run_per_group
from trinity_core.components.reward_check import check_finite_rewards, finite_rewards
from trinity_core.experience import Experience
from trinity_core.ops import group_stats
from trinity_plugin_rec.kernel import drop_keys, rec_scores
from trinity_plugin_rec.metrics import rec_metrics

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["RECAdvantageArgs", "RECGroupedAdvantage"]


class RECAdvantageArgs(ComponentArgs):
    """Arguments of :class:`RECGroupedAdvantage` (the reference's three plus the drop controls)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the group std before dividing (std_normalize).")
    std_normalize: bool = Field(
        False, description="Divide the centred reward by the group's biased std plus epsilon."
    )
    drop: Literal["balance"] | None = Field(
        None,
        description=(
            "'balance': when a group has more negatives (r < mean) than positives, drop the surplus "
            "negatives; None drops nothing."
        ),
    )
    drop_seed: int = Field(
        0,
        description=(
            "Seed of the balance drop: which negatives go is decided by a hash of (drop_seed, eid.uid), "
            "so it is reproducible and independent of the batch order."
        ),
    )
    keep_dropped: bool = Field(
        False,
        description=(
            "False: balance-dropped experiences are removed from the output. True: they stay with "
            "advantage 0, as in the reference (they then still count in token-mean denominators)."
        ),
    )


class RECGroupedAdvantage(GroupAdvantage):
    """REC: group-centred rewards A_i = r_i - mean_g (optionally / (std_g + eps)) with a balance drop.

    Over task groups (``eid.tid``), with ``n_g`` members and rewards ``r_i`` (float64 statistics):

    1. ``μ¹_g = mean(r)``; ``i`` is positive when ``r_i ≥ μ¹_g``.
    2. ``drop="balance"``: if ``neg_g > pos_g``, the ``neg_g − pos_g`` negatives with the smallest keys
       ``blake2b(f"{drop_seed}/{uid}")`` are dropped: deterministic, seeded, independent of the order of
       the batch and of other groups (the reference draws them with an unseeded ``randperm``).
    3. Over the kept experiences: ``μ_g = mean``, ``σ_g = std_biased`` (population std, as the reference).
    4. ``A_i = r_i − μ_g``, or ``(r_i − μ_g) / (σ_g + ε)`` with ``std_normalize``; broadcast over the
       response and multiplied by ``action_mask``; ``returns = advantages``.

    Policies (differences from trinity-rft 0.6.0; reasons in docs/reference-differences.md):

    * **dropped experiences** are removed from the output by default (``keep_dropped=False``), so they no
      longer dilute token-mean denominators with zero-advantage tokens; ``keep_dropped=True`` keeps them
      with ``A = 0`` as the reference does. Either way their count is in the metrics.
    * **singleton groups** get ``A = 0`` (the reference raises ``NameError``) and are excluded from the
      group statistics in the metrics.
    * **zero-variance groups** get exactly 0 (equal rewards: no experience is negative, nothing is
      dropped, every deviation is exactly 0).
    * NaN, infinite or missing rewards are rejected with a ``ValueError`` naming the experience.

    Two equivalent paths: :meth:`process_batch` (vectorized, used by :meth:`process`) and trinity-rft's
    per-group API :meth:`calculate_group_advantage`. Metrics: :mod:`trinity_plugin_rec.metrics`.
    """

    Args: ClassVar[type[ComponentArgs]] = RECAdvantageArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2509.24203"
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    epsilon: float
    std_normalize: bool
    drop: Literal["balance"] | None
    drop_seed: int
    keep_dropped: bool

    # ------------------------------------------------------------------ per group (trinity-rft API)

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], precomputed_std: Tensor | None = None
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one task group; returns the kept experiences (input order) and the group's
        ``reward_mean``, ``reward_std``, ``drop_balance``, ``group_size`` and ``filtered_count``.

        ``precomputed_std`` is accepted for trinity-rft's signature and ignored (REC has no batch std).
        """
        where = f"{type(self).name()} advantage (group {group_id})"
        n = len(exps)
        rewards = finite_rewards(exps, where)
        one_group = torch.zeros(n, dtype=torch.int64)
        first_mean = float(group_stats(rewards, one_group, 1).mean[0])
        negatives = [i for i in range(n) if float(rewards[i]) < first_mean]
        extra = 0
        dropped: set[int] = set()
        if self.drop == "balance":
            extra = max(2 * len(negatives) - n, 0)
            keys = drop_keys([exps[i].eid.uid for i in negatives], self.drop_seed).tolist()
            by_key = sorted(range(len(negatives)), key=keys.__getitem__)  # stable: ties keep order
            dropped = {negatives[j] for j in by_key[:extra]}
        kept = torch.tensor([i not in dropped for i in range(n)])
        second = group_stats(rewards, one_group, 1, valid_mask=kept)
        mean, std = second.mean[0], second.std_biased[0]
        scores = torch.zeros(n, dtype=torch.float64)
        for i in range(n):
            deviation = float(rewards[i] - mean)
            if i in dropped or deviation == 0.0:
                continue
            scores[i] = deviation / (float(std) + self.epsilon) if self.std_normalize else deviation
        write_advantages(exps, scores)
        out = [e for i, e in enumerate(exps) if self.keep_dropped or i not in dropped]
        metrics: Metrics = {
            "reward_mean": mean,
            "reward_std": std,
            "drop_balance": torch.tensor(extra / n, dtype=torch.float64),
            "group_size": n,
            "filtered_count": 0 if self.keep_dropped else len(dropped),
        }
        return out, metrics

    def process_per_group(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Per-group path with the same metrics as the vectorized one."""
        if len(exps) == 0:
            return [], {}
        out, per_group = run_per_group(self, exps)
        metrics = rec_metrics(
            metric_column(per_group, "reward_mean"),
            metric_column(per_group, "reward_std"),
            metric_column(per_group, "drop_balance"),
            metric_column(per_group, "group_size", torch.int64),
            metric_column(per_group, "filtered_count", torch.int64).sum(),
        )
        return out, metrics

    # ------------------------------------------------------------------ vectorized

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics, Tensor]:
        """``(advantages (N,), metrics, keep (N,))`` for the whole batch (:mod:`trinity_plugin_rec.kernel`).

        Rewards are validated from the source experiences (Python floats), so nothing reads a tensor on
        the host; drop keys are hashed from the EIDs (metadata, no tensor involved).
        """
        where = f"{type(self).name()} advantage"
        if not batch.rewards_are_finite():  # names the first bad experience
            check_finite_rewards(batch.experiences, where)
        keys = None
        if self.drop == "balance":
            keys = drop_keys([e.eid.uid for e in batch.experiences], self.drop_seed)
        level = self.group_level
        return self.scores_from_tensors(
            batch.rewards, batch.group_index[level], batch.num_groups[level], keys
        )

    def scores_from_tensors(
        self, rewards: Tensor, index: Tensor, num_groups: int, keys: Tensor | None = None
    ) -> tuple[Tensor, Metrics, Tensor]:
        """The numeric core of :meth:`process_batch` on raw tensors (no host synchronisation).

        ``keys`` are the drop keys (:func:`~trinity_plugin_rec.kernel.drop_keys`), required for the
        balance drop; ``None`` disables it.
        """
        s = rec_scores(
            rewards,
            index,
            num_groups,
            epsilon=self.epsilon,
            std_normalize=self.std_normalize,
            keys=keys if self.drop == "balance" else None,
        )
        removed = torch.zeros_like(s.dropped) if self.keep_dropped else s.dropped
        metrics = rec_metrics(s.group_mean, s.group_std, s.drop_fraction, s.group_size, removed.sum())
        return s.advantages, metrics, ~removed
