"""``asymre`` advantage function: :class:`ASYMREGroupAdvantage` (experience pipeline)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs
from trinity_plugin_opmd.baseline_group import BaselineGroupAdvantage
from trinity_plugin_opmd.kernel import GroupBaselines, group_baselines

__all__ = ["ASYMREArgs", "ASYMREGroupAdvantage"]


class ASYMREArgs(ComponentArgs):
    """Arguments of :class:`ASYMREGroupAdvantage` (the reference's defaults)."""

    baseline_shift: float = Field(
        -0.1,
        allow_inf_nan=False,
        description="Added to the group mean to form the baseline; negative values favour positive updates.",
    )


class ASYMREGroupAdvantage(BaselineGroupAdvantage):
    """AsymRE: A_i = r_i − (mean_g(r) + δ), a task-group mean baseline shifted by δ = baseline_shift.

    Asymmetric REINFORCE (Arnal et al., arXiv:2506.20520): shifting the baseline below the mean
    (``δ < 0``) makes off-policy REINFORCE emphasise positive rewards. Computed in the experience pipeline
    over task groups (``eid.tid``), float64; ``exp.advantages = A_i · action_mask``, ``exp.returns`` a
    copy. Pair it with the ``opmd`` policy loss.

    Policies: ``zero_variance_policy = "finite"``: a group of equal rewards gets exactly ``−δ`` (the
    shift is the whole advantage); a **singleton** is a group of one and gets ``−δ`` too (the reference
    gives it the raw reward ``r``, baseline 0). The ``reward_mean`` metric is the true group
    mean (the reference reported ``baseline − δ``, i.e. ``−δ`` for singletons).
    """

    Args: ClassVar[type[ComponentArgs]] = ASYMREArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2506.20520"
    zero_variance_policy: ClassVar[str] = "finite"

    baseline_shift: float

    def baselines(self, rewards: Tensor, index: Tensor, num_groups: int) -> GroupBaselines:
        """Group means shifted by ``baseline_shift``."""
        return group_baselines(rewards, index, num_groups, "mean", shift=self.baseline_shift)
