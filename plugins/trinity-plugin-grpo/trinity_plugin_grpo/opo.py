"""``opo`` advantage function: :class:`OPOAdvantage` (optimal, length-weighted reward baseline)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from torch import Tensor

from trinity_core.components import ComponentArgs
from trinity_plugin_grpo.baselines import GroupScores, length_weighted_scores
from trinity_plugin_grpo.group_score import GroupScoreAdvantage

__all__ = ["OPOAdvantage", "OPOArgs"]


class OPOArgs(ComponentArgs):
    """Arguments of :class:`OPOAdvantage` (none)."""


class OPOAdvantage(GroupScoreAdvantage):
    """OPO: A_i = r_i - b_g with the length-weighted baseline b_g = sum_j l_j r_j / sum_j l_j.

    Hao et al., *On-Policy RL with Optimal Reward Baseline* (arXiv:2505.23585; verl ``opo``): under exact
    on-policy training the variance-minimising baseline weights each sampled response by its gradient
    norm, which the paper approximates by its length. For experience ``i`` of task group ``g`` (EID level
    ``task``, ``eid.tid``) with ``l_i`` action tokens (``action_mask`` sum; the response length without
    a mask)

        ``b_g = Σ_{j ∈ g} l_j r_j / Σ_{j ∈ g} l_j``, ``A_i = r_i − b_g`` (float64),

    broadcast over the response and multiplied by ``action_mask`` (``returns`` = ``advantages``). A group
    whose responses are all empty uses the plain mean as baseline.

    Policies: a **singleton group** gets advantage exactly 0 (verl uses baseline 0, i.e. the raw reward);
    a **zero-variance group** gets exactly 0 (the baseline of equal rewards is that reward, exactly);
    NaN, infinite or missing rewards are a ``ValueError``. Metrics report the plain group mean.
    """

    Args: ClassVar[type[ComponentArgs]] = OPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2505.23585"

    def group_scores(
        self, rewards: Tensor, lengths: Tensor, index: Tensor, num_groups: int, context: Mapping[str, Tensor]
    ) -> GroupScores:
        """``r_i − b_g`` (:func:`~trinity_plugin_grpo.baselines.length_weighted_scores`)."""
        return length_weighted_scores(rewards, lengths, index, num_groups)
