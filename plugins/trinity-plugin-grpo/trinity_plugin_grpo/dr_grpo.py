"""``dr_grpo`` advantage function: :class:`DrGRPOAdvantage` (Dr. GRPO, mean-centred group rewards)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from torch import Tensor

from trinity_core.components import ComponentArgs
from trinity_plugin_grpo.baselines import GroupScores, centred_scores
from trinity_plugin_grpo.group_score import GroupScoreAdvantage

__all__ = ["DrGRPOAdvantage", "DrGRPOArgs"]


class DrGRPOArgs(ComponentArgs):
    """Arguments of :class:`DrGRPOAdvantage` (none: the method removes GRPO's only scale, the std)."""


class DrGRPOAdvantage(GroupScoreAdvantage):
    """Dr. GRPO: A_i = r_i - mean_g(r), group-centred rewards without division by the group std.

    Liu et al., *Understanding R1-Zero-Like Training: A Critical Perspective* (arXiv:2503.20783): dividing
    by the group std up-weights questions that are too easy or too hard; Dr. GRPO keeps only the group
    mean as baseline. Groups are task groups (EID level ``task``, ``eid.tid``); for experience ``i`` of
    group ``g``

        ``A_i = r_i − μ_g``, ``μ_g = mean_{j ∈ g} r_j`` (float64),

    broadcast over the response and multiplied by ``action_mask`` (``returns`` = ``advantages``). The
    paper pairs it with a constant length normaliser in the loss: ``loss_agg_mode =
    "seq-mean-token-sum-norm"`` (verl: ``norm_adv_by_std_in_grpo=False``; TRL: ``scale_rewards="none"``).

    Policies: a **singleton group** gets advantage exactly 0 (verl uses baseline 0, i.e. the raw reward)
    and is excluded from the statistics; a **zero-variance group** gets exactly 0 (the mean of equal
    rewards is computed exactly); NaN, infinite or missing rewards are a ``ValueError``.
    """

    Args: ClassVar[type[ComponentArgs]] = DrGRPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2503.20783"

    def group_scores(
        self, rewards: Tensor, lengths: Tensor, index: Tensor, num_groups: int, context: Mapping[str, Tensor]
    ) -> GroupScores:
        """``r_i − μ_g`` (:func:`~trinity_plugin_grpo.baselines.centred_scores`)."""
        return centred_scores(rewards, index, num_groups)
