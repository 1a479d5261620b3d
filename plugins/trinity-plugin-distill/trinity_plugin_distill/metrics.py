"""Per-sequence summary metrics shared by the distillation advantages (0-d tensors, no host sync)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["row_sum_stats"]


def row_sum_stats(per_token: Tensor, mask: Tensor, name: str) -> dict[str, Tensor]:
    """``{name}/mean`` and ``{name}/std`` of the per-sequence sums ``s_b = Σ_t m_bt · x_bt``.

    ``std`` is unbiased (``N − 1``) and 0 for a single sequence; both are 0 for an empty batch.
    ``per_token`` may hold NaN at masked positions: values are selected before summing.
    """
    sums = torch.where(mask, per_token, 0.0).sum(dim=-1).to(torch.float64)
    n = sums.shape[0]
    if n == 0:
        zero = sums.new_zeros(())
        return {f"{name}/mean": zero, f"{name}/std": zero.clone()}
    std = sums.std() if n > 1 else sums.new_zeros(())
    return {f"{name}/mean": sums.mean(), f"{name}/std": std}
