"""Global token and sequence counts for micro-batch- and rank-invariant loss aggregation.

Compute one :class:`LossScale` per optimizer step from the masks of all micro-batches the step will
process on this rank; :func:`global_normalizers` sums them and, when ``torch.distributed`` is
initialised, all-reduces them across ranks in one collective. Then aggregate every micro-batch's loss
with :meth:`LossScale.aggregate` and **sum** (do not average) the micro-batch losses; see
:mod:`trinity_core.ops.aggregate` for why the loss is multiplied by ``world_size``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from trinity_core.ops.aggregate import aggregate_loss

__all__ = ["LossScale", "global_normalizers"]


@dataclass(frozen=True, eq=False)
class LossScale:
    """Normalizers shared by every micro-batch of one optimizer step (compared by identity: it holds tensors).

    Attributes:
        num_tokens: 0-d int64 tensor, selected tokens in the whole step (all micro-batches, all ranks).
        num_sequences: 0-d int64 tensor, sequences with at least one selected token, likewise.
        world_size: data-parallel ranks whose gradients are averaged (1 without ``torch.distributed``).
        max_tokens: the ``seq-mean-token-sum-norm`` constant (Dr. GRPO), or ``None``.
    """

    num_tokens: Tensor
    num_sequences: Tensor
    world_size: int = 1
    max_tokens: float | None = None

    def aggregate(self, values: Tensor, mask: Tensor, loss_agg_mode: str = "token-mean") -> Tensor:
        """``aggregate_loss(values, mask, loss_agg_mode)`` normalised by this step's global counts."""
        return aggregate_loss(
            values,
            mask,
            loss_agg_mode,
            normalizer=self.num_tokens,
            seq_normalizer=self.num_sequences,
            max_tokens=self.max_tokens,
            world_size=self.world_size,
        )


def global_normalizers(
    masks: Tensor | Sequence[Tensor],
    *,
    max_tokens: float | None = None,
    all_reduce: bool = True,
    group: dist.ProcessGroup | None = None,
) -> LossScale:
    """Count the selected tokens and non-empty sequences of one optimizer step.

    Args:
        masks: the loss mask ``(B_i, T_i)`` of each micro-batch this rank will process in the step (or
            one mask for a single micro-batch); widths may differ. A row counts as a sequence when it
            selects at least one token, matching :func:`aggregate_loss`.
        max_tokens: stored in the result for ``seq-mean-token-sum-norm``.
        all_reduce: when True and ``torch.distributed`` is initialised, sum the counts over ``group``
            with one ``all_reduce`` (the tensors stay on the masks' device, so NCCL needs CUDA masks) and
            record that group's world size. When False the counts are local and ``world_size`` is 1.
        group: process group for the reduction (default: the world).

    Returns:
        A :class:`LossScale` whose counts are 0-d int64 tensors; no host synchronisation happens.
    """
    mask_list = [masks] if isinstance(masks, Tensor) else list(masks)
    if not mask_list:
        raise ValueError("global_normalizers: got no masks; pass the mask of every micro-batch of the step")
    for i, mask in enumerate(mask_list):
        if mask.dim() == 0:
            raise ValueError(
                f"global_normalizers: mask {i} is 0-d; masks need a token dimension, e.g. (B, T)"
            )
    device = mask_list[0].device
    counts = torch.zeros(2, dtype=torch.int64, device=device)
    for mask in mask_list:
        selected = (mask != 0).reshape(-1, mask.shape[-1]).to(device)
        per_row = selected.sum(dim=-1)
        counts = counts + torch.stack((per_row.sum(), (per_row > 0).sum()))
    world_size = 1
    if all_reduce and dist.is_available() and dist.is_initialized():
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=group)
        world_size = dist.get_world_size(group)
    return LossScale(counts[0], counts[1], world_size=world_size, max_tokens=max_tokens)
