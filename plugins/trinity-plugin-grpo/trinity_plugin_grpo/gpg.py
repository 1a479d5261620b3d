"""``gpg`` advantage function: :class:`GPGAdvantage` (Group Policy Gradient advantages)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs
from trinity_plugin_grpo.baselines import GroupScores, centred_scores, gpg_alpha
from trinity_plugin_grpo.group_score import GroupScoreAdvantage

__all__ = ["GPGAdvantage", "GPGArgs"]


class GPGArgs(ComponentArgs):
    """Arguments of :class:`GPGAdvantage` (defaults as verl's ``gpg`` estimator)."""

    f_norm: float = Field(1.0, gt=0, description="Constant F_norm dividing the centred reward.")
    adaptive_alpha: bool = Field(
        True,
        description=(
            "Scale by alpha = N / #(non-zero rewards) over the whole call (GPG's gradient correction for "
            "samples that contribute nothing); False uses alpha = 1 and makes groups independent."
        ),
    )


class GPGAdvantage(GroupScoreAdvantage):
    """GPG: A_i = alpha * (r_i - mean_g(r)) / F_norm, alpha = N / #(non-zero rewards) over the batch.

    Chu et al., *GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning*
    (arXiv:2504.02546; verl ``gpg``). For experience ``i`` of task group ``g`` (EID level ``task``,
    ``eid.tid``), over the ``N`` experiences of one call (one explore step)

        ``A_i = α · (r_i − μ_g) / F_norm``, ``μ_g = mean_{j ∈ g} r_j``,
        ``α = N / max(#{j : r_j ≠ 0}, 1)`` (``adaptive_alpha``; else ``α = 1``),

    in float64, broadcast over the response and multiplied by ``action_mask`` (``returns`` =
    ``advantages``). ``α`` is the estimator of verl and of the peer survey (non-zero *rewards*); it is a
    batch statistic, so with ``adaptive_alpha`` a group's advantages depend on the other groups' rewards
    (declared below for the conformance kit). It is reported as ``group_advantages/alpha``.

    Policies: a **singleton group** gets advantage exactly 0 (verl: baseline 0, i.e. ``α·r``) but counts
    in ``N`` and in the non-zero count, as in verl; a **zero-variance group** gets exactly 0; NaN,
    infinite or missing rewards are a ``ValueError``.
    """

    Args: ClassVar[type[ComponentArgs]] = GPGArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2504.02546"
    conformance_skip: ClassVar[dict[str, str]] = {
        "groups_are_independent": (
            "GPG's alpha = N / #(non-zero rewards) is a batch statistic by design (adaptive_alpha=True, "
            "the paper's and verl's default); with adaptive_alpha=False groups are independent"
        )
    }

    f_norm: float
    adaptive_alpha: bool

    def batch_context(self, rewards: Tensor, lengths: Tensor) -> dict[str, Tensor]:
        """``{"alpha": α}`` over every experience of the call."""
        if self.adaptive_alpha:
            return {"alpha": gpg_alpha(rewards)}
        return {"alpha": torch.ones((), dtype=torch.float64, device=rewards.device)}

    def group_scores(
        self, rewards: Tensor, lengths: Tensor, index: Tensor, num_groups: int, context: Mapping[str, Tensor]
    ) -> GroupScores:
        """``α · (r_i − μ_g) / F_norm``."""
        centred = centred_scores(rewards, index, num_groups)
        alpha = context["alpha"].to(centred.advantages.device)
        return GroupScores(centred.advantages * alpha / self.f_norm, centred.group_mean, centred.group_valid)
