"""``optimal_token_baseline`` advantage function: :class:`OptimalTokenBaselineAdvantage` (OTB)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_plugin_reinforce.columns import loss_mask

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = [
    "OTBArgs",
    "OptimalTokenBaselineAdvantage",
    "otb_columns",
    "token_baselines",
]


class OTBArgs(ComponentArgs):
    """Arguments of :class:`OptimalTokenBaselineAdvantage` (verl's names and defaults)."""

    handle_zero_tail: bool = Field(
        True,
        description=(
            "Zero the baseline of a group's unique longest response from the second-longest length on "
            "(there the baseline would be that response's own return, giving advantage 0)."
        ),
    )
    epsilon: float = Field(1e-8, ge=0, description="Added to the per-position denominator Σ W·m.")


def otb_columns(batch: ExperienceBatch, needed_by: str) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(old_logprobs, sum_pi_squared, rollout_is_weights or None)``, each ``(N, R)`` float64."""
    try:
        old = batch.column("old_logprobs", needed_by=needed_by)
        sum_sq = batch.column("sum_pi_squared", needed_by=needed_by)
    except KeyError as exc:
        raise KeyError(
            f"{exc.args[0]} The optimal token baseline needs, per response token, the log-prob of the "
            "sampled token (old_logprobs) and Σ_v π(v)² of the next-token distribution (sum_pi_squared, "
            "= exp(logsumexp(2·logits) − 2·logsumexp(logits))) under the policy that computed "
            "old_logprobs; the trainer must store both in batch.extras"
        ) from None
    weights = batch.extras.get("rollout_is_weights")
    as64 = [None if t is None else t.to(torch.float64) for t in (old, sum_sq, weights)]
    return as64[0], as64[1], as64[2]  # type: ignore[return-value]


def token_baselines(
    returns: Tensor,
    w_cumulative: Tensor,
    mask: Tensor,
    index: Tensor,
    num_groups: int,
    *,
    handle_zero_tail: bool,
    epsilon: float,
    skip_empty_rows: bool = False,
) -> Tensor:
    """``B (N, T)``: per group and position ``Σ G·W·m / (Σ W·m + ε)`` over the group's rows.

    Rows of a group with one counted row get 0 (``skip_empty_rows``: rows without a selected position
    are not counted). With ``handle_zero_tail``, the group's unique longest
    row (counted rows only; ``length`` = its number of selected positions) gets 0 from the
    second-longest length on. Vectorized over groups (``index_add``), no host synchronisation.
    """
    n, width = returns.shape
    dev = returns.device
    m = mask.to(returns.dtype)
    num = torch.zeros(num_groups, width, dtype=returns.dtype, device=dev)
    den = torch.zeros_like(num)
    num.index_add_(0, index, returns * w_cumulative * m)
    den.index_add_(0, index, w_cumulative * m)
    baseline = (num / (den + epsilon))[index]
    lengths = mask.sum(dim=-1)
    counted = (lengths > 0).long() if skip_empty_rows else torch.ones(n, dtype=torch.int64, device=dev)
    size = torch.zeros(num_groups, dtype=torch.int64, device=dev).index_add_(0, index, counted)
    baseline = torch.where((size[index] > 1)[:, None], baseline, 0.0)
    if handle_zero_tail:
        longest = torch.full((num_groups,), -1, dtype=lengths.dtype, device=dev)
        longest = longest.scatter_reduce(0, index, lengths, reduce="amax")
        is_max = lengths == longest[index]
        n_max = torch.zeros(num_groups, dtype=torch.int64, device=dev).index_add_(0, index, is_max.long())
        others = torch.where(is_max, torch.full_like(lengths, -1), lengths)
        second = torch.full((num_groups,), -1, dtype=lengths.dtype, device=dev)
        second = second.scatter_reduce(0, index, others, reduce="amax")
        unique_tail = is_max & (n_max[index] == 1) & (size[index] > 1)
        positions = torch.arange(width, device=dev)[None]
        tail = unique_tail[:, None] & (positions >= second[index].clamp_min(0)[:, None])
        baseline = torch.where(tail, 0.0, baseline)
    return baseline


class OptimalTokenBaselineAdvantage(TrainerAdvantage):
    """OTB: a baseline per group and token position, weighted by each path's accumulated variance.

    Optimal token baseline (verl ``optimal_token_baseline``; the baseline ``E[G_t W_t] / E[W_t]`` that
    minimises the variance of the per-token policy gradient under the proxy ``‖∇ log π_j‖² ≈ 1 − 2π_j +
    Σπ²``). Per response token ``t`` of row ``i`` (``m`` the action mask, ``r`` the token-level scores)::

        G_t = Σ_{k≥t} r_k m_k                               (returns, reward-to-go)
        w_t = 1 − 2·exp(old_logprob_t) + Σ_v π_t(v)²        (× rollout_is_weights_t² when given)
        W_t = Σ_{j≤t} w_j m_j                               (cumulative path variance)
        B_t = Σ_{i∈g} G_t W_t m_t / (Σ_{i∈g} W_t m_t + ε)   (per task group g and position t)
        A_t = (G_t − B_t) m_t

    ``B = 0`` in a group of one row, and with ``handle_zero_tail`` on the unique longest row of a group
    from the second-longest length on. ``returns = G``.

    Trainer-side columns (``required_fields``): ``old_logprobs`` and ``sum_pi_squared`` ``(N, R)``,
    both from the policy that scored the rollout (``sum_pi_squared`` = ``exp(logsumexp(2·logits) −
    2·logsumexp(logits))`` per position); optional ``rollout_is_weights`` ``(N, R)``. The trainer must
    put them in ``batch.extras``; without them the call raises a ``KeyError`` saying so.
    Metric: ``otb_baseline_mean`` (masked mean of ``B``).
    """

    Args: ClassVar[type[ComponentArgs]] = OTBArgs
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask", "old_logprobs", "sum_pi_squared")

    handle_zero_tail: bool
    epsilon: float

    def returns_and_weights(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Tensor]:
        """``(G, W, mask)`` of the class docstring, float64 ``(N, R)`` (mask bool)."""
        old, sum_sq, is_weights = otb_columns(batch, f"{type(self).name()} advantage")
        mask = loss_mask(batch)
        width = mask.shape[1]
        scores = batch.token_level_scores().to(mask.device, torch.float64)
        rewards = torch.where(mask, scores, 0.0)
        returns = rewards.flip(-1).cumsum(-1).flip(-1)
        w = 1.0 - 2.0 * torch.exp(old[:, :width]) + sum_sq[:, :width]
        if is_weights is not None:
            w = w * is_weights[:, :width] ** 2
        w_cumulative = torch.where(mask, w, 0.0).cumsum(-1)
        return returns, w_cumulative, mask

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)``, both ``(N, R)`` float32."""
        returns, w_cumulative, mask = self.returns_and_weights(batch)
        index = batch.group_index["task"].to(mask.device)
        baseline = token_baselines(
            returns,
            w_cumulative,
            mask,
            index,
            batch.num_groups["task"],
            handle_zero_tail=self.handle_zero_tail,
            epsilon=self.epsilon,
        )
        advantages = torch.where(mask, returns - baseline, 0.0)
        count = mask.sum().clamp_min(1)
        metrics: Metrics = {"otb_baseline_mean": torch.where(mask, baseline, 0.0).sum() / count}
        return advantages.float(), returns.float(), metrics
