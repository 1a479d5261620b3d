"""``jsd`` advantage function: :class:`JSDAdvantage` (generalised Jensen-Shannon surrogate)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_plugin_distill.columns import student_logprobs, teacher_logprobs, token_mask
from trinity_plugin_distill.metrics import row_sum_stats

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["JSDAdvantage", "JSDArgs", "jsd_student_term", "jsd_surrogate"]


class JSDArgs(ComponentArgs):
    """Arguments of :class:`JSDAdvantage` (defaults = reference ``default_args()``, plus ``estimator``)."""

    lambda_coef: float = Field(
        0.5, ge=0, le=1, description="Mixture weight beta: m = beta * p_teacher + (1 - beta) * p_student."
    )
    kl_coef: float = Field(1.0, ge=0, description="Scale of the advantage: A = -kl_coef * jsd.")
    temperature: float = Field(
        1.0,
        gt=0,
        description=(
            "Divides both sampled-token log-probs (not logits) before the surrogate; 1.0 = exact. "
            "Not a sampling temperature: see the class docstring."
        ),
    )
    chunk_size: int | None = Field(
        None,
        ge=1,
        description="Compute over the flattened tokens in chunks of this size (memory); None = at once.",
    )
    estimator: Literal["student", "reference"] = Field(
        "student",
        description=(
            "'student': the policy-gradient estimate of the JSD under student sampling, "
            "(1 - beta) * (s - log m); 'reference': trinity-rft 0.6.0's surrogate, "
            "beta * (t - log m) + (1 - beta) * (s - log m), which is never positive, so its advantage "
            "raises every sampled token. Equal at beta = 0 and 1."
        ),
    )


def _log_mixture(student: Tensor, teacher: Tensor, beta: float) -> Tensor:
    """``log m = log((1 − beta)·e^s + beta·e^t)`` by ``logaddexp`` (never by ``exp``)."""
    return torch.logaddexp(student + math.log1p(-beta), teacher + math.log(beta))


def jsd_surrogate(student: Tensor, teacher: Tensor, beta: float) -> Tensor:
    """trinity-rft 0.6.0's per-token surrogate of the generalised JSD from the sampled tokens' log-probs.

    ``beta = 0``: ``s − t``; ``beta = 1``: ``t − s``; otherwise
    ``jsd = beta · (t − log m) + (1 − beta) · (s − log m)``, which is never positive: it is
    ``beta·t + (1 − beta)·s − log((1 − beta)·e^s + beta·e^t)``, a weighted mean of logs minus the log of
    the weighted mean (Jensen). Elementwise; inputs must be finite.
    """
    if beta == 0.0:
        return student - teacher
    if beta == 1.0:
        return teacher - student
    log_m = _log_mixture(student, teacher, beta)
    return beta * (teacher - log_m) + (1.0 - beta) * (student - log_m)


def jsd_student_term(student: Tensor, teacher: Tensor, beta: float) -> Tensor:
    """The per-token JSD term whose negative is the policy-gradient advantage under student sampling.

    For ``D = beta·KL(p_t‖m) + (1 − beta)·KL(p_s‖m)`` with ``m = beta·p_t + (1 − beta)·p_s``,
    ``∂D/∂p_s(y) = (1 − beta)·log(p_s(y)/m(y))`` (the terms through ``m`` cancel), so
    ``∇D = E_{y∼p_s}[(1 − beta)(s − log m)·∇log p_s(y)]``: the term is ``(1 − beta)(s − log m)``, whose
    mean under student sampling is ``(1 − beta)·KL(p_s‖m) ≥ 0``. ``beta = 0`` and ``1`` are the
    reference's special cases (``s − t``, ``t − s``). Elementwise; inputs must be finite.
    """
    if beta == 0.0 or beta == 1.0:
        return jsd_surrogate(student, teacher, beta)
    return (1.0 - beta) * (student - _log_mixture(student, teacher, beta))


class JSDAdvantage(TrainerAdvantage):
    """JSD distillation: per-token advantage A_t = -kl_coef * jsd_beta(student, teacher) of sampled tokens.

    Generalised Jensen-Shannon distillation (GKD, Agarwal et al., arXiv:2306.13649) reduced to what
    the batch holds: the log-probs ``s`` (student) and ``t`` (teacher) of the **sampled token only**,
    divided by ``temperature = T``. With ``β = lambda_coef`` and
    ``log m = log((1 − β)·e^s + β·e^t)`` (computed by ``logaddexp``, never by ``exp``):

        ``jsd = (1 − β)(s − log m)``  (``estimator="student"``, the default), or
        ``jsd = β (t − log m) + (1 − β)(s − log m)``  (``estimator="reference"``),
        (both: ``β = 0``: ``s − t``; ``β = 1``: ``t − s``),
        ``A_bt = −kl_coef · jsd_bt · m_bt``,  ``returns = A``.

    **Estimator.** The true generalised JSD sums over the vocabulary, ``D = β·KL(p_t‖m) +
    (1 − β)·KL(p_s‖m)``. Its gradient under student sampling is ``E[(1 − β)(s − log m)·∇log p_s]``
    (:func:`jsd_student_term`), so ``estimator="student"`` uses ``jsd = (1 − β)(s − log m)``: positive
    advantage where the mixture (the teacher) gives the sampled token more probability than the
    student, negative where less. ``estimator="reference"`` is trinity-rft 0.6.0's surrogate
    (:func:`jsd_surrogate`), which replaces each KL by its log-ratio at the sampled token without the
    importance weight ``p_t/p_s`` the teacher term needs: that ``jsd`` is **never positive** for
    ``0 < β < 1`` (Jensen), so its advantage raises every sampled token, more where student and teacher
    disagree, and the student collapses instead of learning the teacher (docs/benchmarks.md, "Learning
    baselines"). Both keep the reference's end points, which are special
    cases and not the limits of the mixture formula (which tends to 0 as ``β → 0`` or ``1``):
    ``β = 0`` gives ``A = kl_coef (t − s)``, the ``on_policy_distill`` advantage, while ``β = 1`` gives
    ``A = kl_coef (s − t)``, which pushes the student *away* from the teacher; prefer ``0 ≤ β < 1``.

    **Temperature**: only sampled-token log-probs are available, so ``T`` divides them (``s/T``,
    ``t/T``, i.e. the unnormalised ``p^{1/T}``), not the logits: the log-normaliser of
    ``softmax(z/T)`` is missing, and ``T ≠ 1`` is not a distillation temperature. Apply a real
    temperature when sampling and when scoring with the teacher, and keep ``T = 1`` here.

    ``chunk_size`` processes the flattened ``(N·R)`` tokens in slices (bounded temporaries, same
    result, no host synchronisation). Masked positions are selected away before computing (NaN there
    never leaks). Metrics: ``jsd/mean``, ``jsd/std`` (of per-sequence sums ``Σ_t jsd·m``; std unbiased,
    0 for one sequence) and ``advantages/mean`` (mean of ``Σ_t A``).
    """

    Args: ClassVar[type[ComponentArgs]] = JSDArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2306.13649"
    required_fields: ClassVar[tuple[str, ...]] = ("teacher_logprobs", "logprobs", "action_mask")
    requires: ClassVar[frozenset[str]] = frozenset({"teacher"})

    lambda_coef: float
    kl_coef: float
    temperature: float
    chunk_size: int | None
    estimator: Literal["student", "reference"]

    def per_token(self, student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
        """``jsd`` per token ``(N, R)``, 0 at masked positions (inputs selected before any arithmetic)."""
        s = torch.where(mask, student, 0.0)
        t = torch.where(mask, teacher, 0.0)
        if self.temperature != 1.0:
            s, t = s / self.temperature, t / self.temperature
        term = jsd_student_term if self.estimator == "student" else jsd_surrogate
        if self.chunk_size is None or s.numel() <= self.chunk_size:
            values = term(s, t, self.lambda_coef)
        else:
            flat_s, flat_t = s.reshape(-1), t.reshape(-1)
            values = torch.cat(
                [
                    term(cs, ct, self.lambda_coef)
                    for cs, ct in zip(
                        torch.split(flat_s, self.chunk_size),
                        torch.split(flat_t, self.chunk_size),
                        strict=True,
                    )
                ]
            ).reshape(s.shape)
        return torch.where(mask, values, 0.0)

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(A, A.clone(), metrics)`` with ``A = −kl_coef · jsd`` on selected tokens."""
        name = type(self).name()
        mask = token_mask(batch)
        jsd = self.per_token(student_logprobs(batch, name), teacher_logprobs(batch, name), mask)
        advantages = -self.kl_coef * jsd
        metrics: Metrics = dict(row_sum_stats(jsd, mask, "jsd"))
        metrics["advantages/mean"] = row_sum_stats(advantages, mask, "advantages")["advantages/mean"]
        return advantages, advantages.clone(), metrics
