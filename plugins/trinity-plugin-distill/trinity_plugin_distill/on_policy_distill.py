"""``on_policy_distill`` advantage function: :class:`OnPolicyDistillAdvantage`."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_plugin_distill.columns import student_logprobs, teacher_logprobs, token_mask
from trinity_plugin_distill.metrics import row_sum_stats

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["OnPolicyDistillAdvantage", "OnPolicyDistillArgs"]


class OnPolicyDistillArgs(ComponentArgs):
    """Arguments of :class:`OnPolicyDistillAdvantage` (defaults = reference ``default_args()``)."""

    kl_coef: float = Field(
        1.0, ge=0, description="Scale of the advantage: A = kl_coef * (teacher - student)."
    )


class OnPolicyDistillAdvantage(TrainerAdvantage):
    """On-policy distillation: per-token advantage A_t = kl_coef * (log p_teacher(y_t) - log p_student(y_t)).

    The student samples ``y``; the teacher scores the same tokens. With the policy-gradient losses
    (``importance_sampling`` or ``ppo``) this minimises the reverse KL ``KL(student || teacher)`` of
    the sampled tokens (Tinker's on-policy distillation; Agarwal et al., arXiv:2306.13649):

        ``A_bt = kl_coef · (t_bt − s_bt) · m_bt``,  ``returns = A``,

    ``t`` = ``teacher_logprobs`` (from ``Experience.teacher_logprobs``), ``s`` = the student's
    log-probs (``old_logprobs`` from the trainer when present, else the rollout ``logprobs``), ``m`` the
    action mask (response mask without one). Masked positions are selected away first, so NaN there
    never reaches the result. No reward is used.

    Metrics (0-d tensors): ``kl/mean`` and ``kl/std`` (unbiased; 0 for one sequence) of the
    per-sequence sums ``Σ_t (s − t)·m``, and ``advantages/mean`` = mean of ``Σ_t A``.
    """

    Args: ClassVar[type[ComponentArgs]] = OnPolicyDistillArgs
    paper: ClassVar[str | None] = "https://thinkingmachines.ai/blog/on-policy-distillation/"
    required_fields: ClassVar[tuple[str, ...]] = ("teacher_logprobs", "logprobs", "action_mask")
    requires: ClassVar[frozenset[str]] = frozenset({"teacher"})

    kl_coef: float

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(A, A.clone(), metrics)`` with ``A = kl_coef · (teacher − student)`` on selected tokens."""
        name = type(self).name()
        mask = token_mask(batch)
        student = student_logprobs(batch, name)
        teacher = teacher_logprobs(batch, name)
        gap = torch.where(mask, teacher - student, 0.0)
        advantages = self.kl_coef * gap
        metrics: Metrics = dict(row_sum_stats(-gap, mask, "kl"))
        metrics["advantages/mean"] = row_sum_stats(advantages, mask, "advantages")["advantages/mean"]
        return advantages, advantages.clone(), metrics
