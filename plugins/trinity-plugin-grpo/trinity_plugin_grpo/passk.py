"""``grpo_passk`` advantage function: :class:`GRPOPassKAdvantage` (pass@k: only the best response scores)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs
from trinity_plugin_grpo.baselines import GroupScores, passk_scores
from trinity_plugin_grpo.group_score import GroupScoreAdvantage

__all__ = ["GRPOPassKAdvantage", "GRPOPassKArgs"]


class GRPOPassKArgs(ComponentArgs):
    """Arguments of :class:`GRPOPassKAdvantage` (defaults as verl's ``grpo_passk``)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the group reward std before dividing.")
    norm_adv_by_std_in_grpo: bool = Field(
        True, description="Divide r_max - r_second by (group std + epsilon); False keeps the raw gap."
    )


class GRPOPassKAdvantage(GroupScoreAdvantage):
    """Pass@k: the group's best response gets (r_max - r_second) / (std_g + epsilon), all others 0.

    Tang et al., *Optimizing Language Models for Inference Time Objectives using Reinforcement Learning*
    (arXiv:2503.19595; verl ``grpo_passk``): for a pass@k objective only the best of the ``k`` samples
    matters, and its leave-one-out advantage is the margin over the runner-up. For task group ``g``
    (EID level ``task``, ``eid.tid``) with rewards ``r``:

        ``A_best = (r_max − r_second) / (σ_g + ε)`` (``σ_g`` unbiased std; no division when
        ``norm_adv_by_std_in_grpo`` is False), ``A_i = 0`` for every other member,

    in float64, broadcast over the response and multiplied by ``action_mask`` (``returns`` =
    ``advantages``).

    Policies: when several members share the best reward the margin is 0 and the whole group gets 0
    (verl picks one of them by ``topk`` order, with the same value 0); a **singleton group** gets 0
    (verl raises: pass@k needs two samples); a **zero-variance group** gets exactly 0; NaN, infinite or
    missing rewards are a ``ValueError``.
    """

    Args: ClassVar[type[ComponentArgs]] = GRPOPassKArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2503.19595"

    epsilon: float
    norm_adv_by_std_in_grpo: bool

    def group_scores(
        self, rewards: Tensor, lengths: Tensor, index: Tensor, num_groups: int, context: Mapping[str, Tensor]
    ) -> GroupScores:
        """The pass@k margin of each group's unique best member (:func:`~.baselines.passk_scores`)."""
        return passk_scores(
            rewards, index, num_groups, epsilon=self.epsilon, normalize=self.norm_adv_by_std_in_grpo
        )
