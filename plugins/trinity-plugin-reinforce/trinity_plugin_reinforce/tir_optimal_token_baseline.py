"""``tir_optimal_token_baseline`` advantage function: :class:`TIROptimalTokenBaselineAdvantage`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from trinity_core.components import Metrics
from trinity_plugin_reinforce.optimal_token_baseline import OptimalTokenBaselineAdvantage, token_baselines

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["TIROptimalTokenBaselineAdvantage", "compact", "expand"]


def compact(values: Tensor, mask: Tensor) -> Tensor:
    """``(N, T)``: each row's selected values moved left, in order, zero after them (no host sync)."""
    width = mask.shape[1]
    position = mask.long().cumsum(-1) - 1
    target = torch.where(mask, position, width)  # unselected values go to a spare column
    out = values.new_zeros(values.shape[0], width + 1)
    out.scatter_(1, target, torch.where(mask, values, 0.0))
    return out[:, :width]


def expand(compacted: Tensor, mask: Tensor) -> Tensor:
    """The inverse of :func:`compact`: compacted values back to the selected positions, zero elsewhere."""
    position = (mask.long().cumsum(-1) - 1).clamp_min(0)
    return torch.where(mask, compacted.gather(1, position), 0.0)


class TIROptimalTokenBaselineAdvantage(OptimalTokenBaselineAdvantage):
    """TIR-OTB: the optimal token baseline over each response's own tokens, for multi-turn rollouts.

    verl ``tir_optimal_token_baseline`` (tool-integrated reasoning). As
    :class:`~trinity_plugin_reinforce.optimal_token_baseline.OptimalTokenBaselineAdvantage`, but the
    baseline of the ``k``-th selected (model) token of a row is formed from the ``k``-th selected tokens
    of its group, not from the tokens at the same padded position: tool and observation tokens
    (``action_mask`` False) between turns do not shift the comparison. With ``G``, ``W`` as in OTB
    (computed at the original positions), ``c`` the compaction of a row's selected positions::

        B_k = Σ_{i∈g} G_c(k) W_c(k) / (Σ_{i∈g} W_c(k) + ε)   over the rows of g with a selected token
        A_t = G_t − B_{k(t)} on selected tokens, 0 elsewhere

    Rows without a selected token are left out of their group; a group of one row gets ``B = 0``;
    ``handle_zero_tail`` as OTB (on compacted lengths). Single-turn rows (no holes in the mask) give
    exactly OTB. Needs the same trainer-side columns as OTB (``old_logprobs``, ``sum_pi_squared``,
    optional ``rollout_is_weights``). ``returns = G``.
    """

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)``, both ``(N, R)`` float32."""
        returns, w_cumulative, mask = self.returns_and_weights(batch)
        lengths = mask.sum(dim=-1)
        packed = torch.arange(mask.shape[1], device=mask.device)[None] < lengths[:, None]
        index = batch.group_index["task"].to(mask.device)
        baseline = token_baselines(
            compact(returns, mask),
            compact(w_cumulative, mask),
            packed,
            index,
            batch.num_groups["task"],
            handle_zero_tail=self.handle_zero_tail,
            epsilon=self.epsilon,
            skip_empty_rows=True,
        )
        baseline = expand(baseline, mask)
        advantages = torch.where(mask, returns - baseline, 0.0)
        count = mask.sum().clamp_min(1)
        metrics: Metrics = {"otb_baseline_mean": baseline.sum() / count}
        return advantages.float(), returns.float(), metrics
