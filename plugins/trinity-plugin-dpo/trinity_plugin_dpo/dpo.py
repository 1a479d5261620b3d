"""``dpo`` policy loss: :class:`DPOLossFn` (trinity-rft's ``trinity.algorithm.policy_loss_fn.DPOLossFn``)."""

from __future__ import annotations

from typing import Any, ClassVar, Final

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, PolicyLossFn
from trinity_core.ops import masked_sum

__all__ = ["PAIR_KEYS", "DPOArgs", "DPOLossFn", "pair_order"]

PAIR_KEYS: Final[tuple[str, ...]] = ("pair_id", "chosen_mask")
"""Optional batch columns giving explicit pairs: ``pair_id`` ``(B,)`` int, ``chosen_mask`` ``(B,)`` bool."""


class DPOArgs(ComponentArgs):
    """Arguments of :class:`DPOLossFn` (defaults: trinity-rft 0.6.0's)."""

    beta: float = Field(0.1, gt=0, description="Inverse temperature β of the implicit reward β·log(π/π_ref).")
    label_smoothing: float = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="Probability ε that a preference label is flipped (conservative DPO); 0 is plain DPO.",
    )
    use_pair_ids: bool = Field(
        False,
        description=(
            "Read the batch columns pair_id (B,) and chosen_mask (B,) and pair rows by them (any row order "
            "works). False: rows are paired by adjacency, (0, 1), (2, 3), ..., chosen first."
        ),
    )


def pair_order(pair_id: Tensor, chosen_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Order rows as (chosen, rejected) of pair after pair, and flag well-formed pairs.

    Rows are sorted (stably) by ``2 · pair_id + rejected``; ``order[2k]`` and ``order[2k + 1]`` form pair
    ``k``, which is well-formed when both rows carry the same id, the first is chosen and the second is
    rejected. Every pair is well-formed exactly when each id has one chosen and one rejected row.

    Returns:
        ``(order (B,), well_formed (B // 2,) bool)``, without host synchronisation.
    """
    chosen = chosen_mask if chosen_mask.dtype == torch.bool else chosen_mask != 0
    key = pair_id.to(torch.int64) * 2 + (~chosen).to(torch.int64)
    order = torch.sort(key, stable=True).indices
    first, second = order[0::2], order[1::2]
    well_formed = (pair_id[first] == pair_id[second]) & chosen[first] & ~chosen[second]
    return order, well_formed


class DPOLossFn(PolicyLossFn):
    """DPO, per pair: L = mean_k [−(1−ε) log σ(β z_k) − ε log σ(−β z_k)], z_k = ρ_chosen − ρ_rejected.

    Direct Preference Optimization (Rafailov et al., arXiv:2305.18290). For each row ``b`` the implicit
    reward is ``ρ_b = Σ_t m_bt (log π_bt − log π_ref,bt)``, summed over that row's response tokens; each
    pair ``k`` gives the logit ``z_k = ρ_chosen(k) − ρ_rejected(k)``. Gradient:
    ``∂ℓ_k/∂z_k = −β [(1−ε) σ(−β z_k) − ε σ(β z_k)]``.

    Pairs: by adjacency (rows ``2k`` chosen, ``2k + 1`` rejected, the layout of
    ``split_dpo_experience_to_single_turn``), or, with ``use_pair_ids`` (or whenever the caller passes
    them), by the columns ``pair_id`` and ``chosen_mask``. An odd number of rows is a ``ValueError``; ids
    that do not form exactly one chosen and one rejected row each make the loss NaN (checked on the
    device, no host synchronisation) and are counted in the metric ``malformed_pairs``.

    Normalisation: each row carries its pair's loss, and the rows are averaged with
    ``seq-mean-token-sum`` over rows that select a token, which equals the mean over pairs; with the
    trainer's ``loss_scale`` the sum is divided by the step's global row count (two per pair), so any
    split into micro-batches that keeps pairs together gives the full-batch gradient.

    **Difference from the reference**: the reference sums the log-ratios of *all* chosen rows
    of a micro-batch into one logit (and all rejected rows into another), which is DPO only when a
    micro-batch holds exactly one pair. Here every pair has its own logit. Metrics (detached, this call,
    means over pairs): ``dpo_loss``, ``chosen_reward`` (``β·ρ_chosen``), ``rejected_reward``,
    ``accuracy_mean`` (fraction with ``ρ_chosen > ρ_rejected``), ``malformed_pairs``.
    """

    Args: ClassVar[type[ComponentArgs]] = DPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2305.18290"

    beta: float
    label_smoothing: float
    use_pair_ids: bool

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``DPOLossFn(backend="verl", beta=0.1, label_smoothing=0.0, use_pair_ids=False)``."""
        super().__init__(backend=backend, **args)

    @property
    def select_keys(self) -> list[str]:
        """``[ref_log_prob, response_mask]`` (verl), and ``pair_id``, ``chosen_mask`` if ``use_pair_ids``."""
        keys = super().select_keys
        if self.use_pair_ids:
            return keys
        return [key for key in keys if self.mapper.to_trinity(key) not in PAIR_KEYS]

    @classmethod
    def conformance_inputs(cls, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Explicit pairs for the conformance kit: rows paired in reverse order, rejected first."""
        b = inputs["action_mask"].shape[0]
        rows = torch.arange(b)
        return {"pair_id": (b - 1 - rows) // 2 + 10, "chosen_mask": rows % 2 == 1}

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        action_mask: Tensor,
        pair_id: Tensor | None = None,
        chosen_mask: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Per-pair DPO loss over the ``B`` rows and metrics.

        Args:
            logprob: current log-probs ``(B, T)``.
            ref_logprob: reference-model log-probs ``(B, T)``.
            action_mask: ``(B, T)``, the response tokens of each row.
            pair_id: optional ``(B,)`` integer pair id of each row (with ``chosen_mask``).
            chosen_mask: optional ``(B,)`` bool, True for the chosen row of each pair.

        Raises:
            ValueError: an odd number of rows, or only one of ``pair_id`` / ``chosen_mask``.
        """
        rows = logprob.shape[0]
        if rows % 2:
            raise ValueError(
                f"policy loss 'dpo' got {rows} rows; DPO rows come in (chosen, rejected) pairs, so the batch "
                "and every micro-batch must hold an even number of rows with pairs kept together"
            )
        if (pair_id is None) != (chosen_mask is None):
            raise ValueError("policy loss 'dpo': pass both pair_id and chosen_mask (shape (B,)), or neither")
        if self.use_pair_ids and pair_id is None:
            raise ValueError(
                "policy loss 'dpo' has use_pair_ids=True but got no pair_id/chosen_mask; add these batch "
                "columns or set use_pair_ids=False to pair rows by adjacency"
            )
        mask = action_mask if action_mask.dtype == torch.bool else action_mask != 0
        dtype = torch.promote_types(logprob.dtype, torch.float32)
        rho = masked_sum(logprob.to(dtype) - ref_logprob.to(dtype), mask, dim=-1)
        if pair_id is None or chosen_mask is None:
            order = torch.arange(rows, device=logprob.device)
            well_formed = torch.ones(rows // 2, dtype=torch.bool, device=logprob.device)
        else:
            order, well_formed = pair_order(pair_id.to(logprob.device), chosen_mask.to(logprob.device))
        rho_chosen, rho_rejected = rho[order[0::2]], rho[order[1::2]]
        logits = self.beta * (rho_chosen - rho_rejected)
        eps = self.label_smoothing
        pair_loss = -F.logsigmoid(logits) * (1 - eps) - F.logsigmoid(-logits) * eps
        # Each row carries its pair's loss; averaging rows (two per pair) is the mean over pairs.
        row_loss = torch.zeros(rows, dtype=dtype, device=logprob.device).scatter(
            0, order, pair_loss.repeat_interleave(2)
        )
        row_selected = mask.any(dim=-1, keepdim=True)
        loss = self.aggregate(row_loss.unsqueeze(-1), row_selected, "seq-mean-token-sum")
        all_well_formed = well_formed.all()
        loss = torch.where(all_well_formed, loss, torch.full_like(loss, float("nan")))
        with torch.no_grad():
            pairs = max(rows // 2, 1)
            metrics = {
                "dpo_loss": loss.detach(),
                "chosen_reward": self.beta * rho_chosen.sum() / pairs,
                "rejected_reward": self.beta * rho_rejected.sum() / pairs,
                "accuracy_mean": (rho_chosen > rho_rejected).to(dtype).sum() / pairs,
                "malformed_pairs": (~well_formed).to(dtype).sum(),
            }
        return loss, metrics
