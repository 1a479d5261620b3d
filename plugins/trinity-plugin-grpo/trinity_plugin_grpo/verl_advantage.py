"""``grpo_verl`` advantage function: :class:`GRPOVerlAdvantage` (GRPO computed in the trainer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_core.components.group_metrics import GROUP_PREFIX, group_reward_metrics
from trinity_core.components.reward_check import check_finite_rewards
from trinity_plugin_grpo.baselines import centred_scores
from trinity_plugin_grpo.kernel import grpo_scores

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["GRPOVerlAdvantage", "GRPOVerlArgs"]


class GRPOVerlArgs(ComponentArgs):
    """Arguments of :class:`GRPOVerlAdvantage` (the reference's ``epsilon`` plus verl's std switch)."""

    epsilon: float = Field(1e-6, ge=0, description="Added to the group reward std before dividing.")
    norm_adv_by_std_in_grpo: bool = Field(
        True,
        description="Divide by (group std + epsilon) as GRPO; False gives mean-centred scores (Dr. GRPO).",
    )


class GRPOVerlAdvantage(TrainerAdvantage):
    """GRPO in the trainer: A = (sum_t score_t - mean_g) / (std_g + epsilon) on the trainer batch.

    The trainer-side GRPO of verl and of the reference (``grpo_verl``; Shao et al.,
    *DeepSeekMath*, arXiv:2402.03300). It runs on the columnar
    :class:`~trinity_core.batch.ExperienceBatch` (``compute_in_trainer()`` is True), so it belongs to
    algorithm presets with ``compute_advantage_in_trainer = True``; the pipeline-side ``grpo`` computes
    the same formula in the experience pipeline. For sequence ``i`` of task group ``g``
    (``batch.group_index["task"]``, i.e. ``eid.tid``, the reference's ``uid``):

        ``s_i = Σ_t token_level_scores[i, t]`` over the response (``batch.token_level_scores()``: the
        per-token rewards, or the scalar reward on the last response token),
        ``A_i = (s_i − μ_g) / (σ_g + ε)`` (``σ_g`` unbiased std), or ``A_i = s_i − μ_g`` when
        ``norm_adv_by_std_in_grpo`` is False,

    statistics in float64, broadcast over the response as float32; ``advantages = returns = A`` and the
    base class zeroes them outside ``action_mask`` (``response_mask`` without one).

    Policies (differences from the reference): a **singleton group** gets advantage exactly 0 and is
    excluded from the statistics (the reference uses mean 0, std 1, i.e. ``s/(1+ε)``); a
    **zero-variance group** gets exactly 0 (the reference's float32 mean can be an ulp off, giving
    ``±ulp/ε``); a missing, NaN or infinite scalar reward is a ``ValueError`` naming the experience (the
    reference scores a missing reward as 0). Metrics: ``group_advantages/reward_mean|reward_std/{mean,
    max,min}`` over groups of two or more, ``group_advantages/singleton_count`` (the reference reports
    none).
    """

    Args: ClassVar[type[ComponentArgs]] = GRPOVerlArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2402.03300"

    epsilon: float
    norm_adv_by_std_in_grpo: bool

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)``, both ``(N, R)`` float32 (no host synchronisation)."""
        if batch.token_level_reward is None and not batch.rewards_are_finite():
            check_finite_rewards(batch.experiences, f"{type(self).name()} advantage")
        token_scores = batch.token_level_scores()
        mask = batch.response_mask.to(token_scores.device)
        sequence_scores = torch.where(mask, token_scores.to(torch.float64), 0.0).sum(dim=-1)
        index = batch.group_index["task"].to(token_scores.device)
        num_groups = batch.num_groups["task"]
        stats = grpo_scores(sequence_scores, index, num_groups, epsilon=self.epsilon)
        if self.norm_adv_by_std_in_grpo:
            per_sequence = stats.advantages
        else:
            per_sequence = centred_scores(sequence_scores, index, num_groups).advantages
        advantages = per_sequence.to(torch.float32)[:, None].expand(mask.shape)
        metrics: Metrics = group_reward_metrics(stats.group_mean, stats.group_std, stats.group_valid)
        metrics[f"{GROUP_PREFIX}/singleton_count"] = (~stats.group_valid[index]).sum()
        return advantages, advantages, metrics
