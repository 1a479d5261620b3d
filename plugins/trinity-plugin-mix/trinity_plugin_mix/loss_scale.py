"""Global normalizers per subset (rollout rows, expert rows) for the MIX losses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from trinity_core.ops import LossScale, global_normalizers

__all__ = ["MixLossScale", "mix_normalizers", "subset_masks"]


@dataclass(frozen=True, eq=False)
class MixLossScale:
    """The step's global counts of the rollout ("usual") rows and of the expert rows, separately.

    MIX averages its RL term over rollout tokens and its SFT term over expert tokens; a single
    :class:`~trinity_core.ops.LossScale` counts both together and cannot give either mean. Pass this as
    ``loss_scale=`` to ``mix`` / ``mix_chord``.
    """

    usual: LossScale
    expert: LossScale


def subset_masks(action_mask: Tensor, expert_mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(action_mask ∧ ¬expert, action_mask ∧ expert)`` as bool ``(B, T)``; ``expert_mask`` is ``(B,)``."""
    tokens = action_mask if action_mask.dtype == torch.bool else action_mask != 0
    expert = (expert_mask if expert_mask.dtype == torch.bool else expert_mask != 0).to(tokens.device)
    return tokens & ~expert.unsqueeze(-1), tokens & expert.unsqueeze(-1)


def mix_normalizers(
    masks: Tensor | Sequence[Tensor],
    expert_masks: Tensor | Sequence[Tensor],
    *,
    max_tokens: float | None = None,
    all_reduce: bool = True,
    group: dist.ProcessGroup | None = None,
) -> MixLossScale:
    """Count rollout and expert tokens and sequences over every micro-batch of the step (and every rank).

    Args:
        masks: the ``action_mask`` ``(B_i, T_i)`` of each micro-batch this rank processes in the step.
        expert_masks: the matching ``expert_mask`` ``(B_i,)`` of each micro-batch.
        max_tokens, all_reduce, group: as for :func:`trinity_core.ops.global_normalizers`.
    """
    mask_list = [masks] if isinstance(masks, Tensor) else list(masks)
    expert_list = [expert_masks] if isinstance(expert_masks, Tensor) else list(expert_masks)
    if len(mask_list) != len(expert_list):
        raise ValueError(
            f"mix_normalizers: got {len(mask_list)} masks but {len(expert_list)} expert masks; pass one "
            "expert_mask per micro-batch"
        )
    pairs = [subset_masks(m, e) for m, e in zip(mask_list, expert_list, strict=True)]
    kwargs = {"max_tokens": max_tokens, "all_reduce": all_reduce, "group": group}
    return MixLossScale(
        usual=global_normalizers([u for u, _ in pairs], **kwargs),  # type: ignore[arg-type]
        expert=global_normalizers([e for _, e in pairs], **kwargs),  # type: ignore[arg-type]
    )
