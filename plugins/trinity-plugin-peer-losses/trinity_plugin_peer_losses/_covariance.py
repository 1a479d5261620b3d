"""Token covariance and a sync-free, deterministic top-k selection (Clip-Cov and KL-Cov).

Cui et al., *The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models*
(arXiv:2505.22617) rank the tokens of a batch by the centred cross term of advantage and log-prob,

    ``c_t = (A_t − Ā) · (log π_t − mean(log π))``,

whose mean is the covariance that drives the change of policy entropy. Both losses then act on a small
fraction of the tokens with the largest ``c_t``.

Selection here never leaves the device: the count ``k`` is a 0-d tensor and the top ``k`` are found by a
stable descending sort plus a rank comparison (``torch.topk`` needs a Python ``int``, hence a host sync).
Ties are broken by position in the flattened ``(B, T)`` batch, earliest first, so the selection is
deterministic. Statistics are computed in float64 and without gradient: selection is a discrete choice.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["selection_count", "token_covariance", "top_k_mask"]


@torch.no_grad()
def token_covariance(advantages: Tensor, logprob: Tensor, mask: Tensor) -> Tensor:
    """``c_t = (A_t − Ā)(log π_t − mean log π)`` in float64 on selected tokens, 0 elsewhere.

    ``Ā`` and ``mean log π`` are means over the selected tokens of *this call* (an all-masked call gives
    0 everywhere). Inputs must already be finite at selected positions; masked positions are ignored.
    """
    m = mask.expand(logprob.shape)
    zero = torch.zeros((), dtype=torch.float64, device=m.device)
    adv = torch.where(m, advantages.to(torch.float64).expand(logprob.shape), zero)
    lp = torch.where(m, logprob.detach().to(torch.float64), zero)
    n = m.sum().to(torch.float64).clamp_min(1)
    cov = (adv - adv.sum() / n) * (lp - lp.sum() / n)
    return torch.where(m, cov, zero)


def selection_count(mask: Tensor, ratio: float) -> Tensor:
    """``k = max(⌊ratio · n⌋, 1)`` as a 0-d int64 tensor, ``n`` the selected tokens of ``mask``.

    ``ratio · n`` is evaluated in float64, as the peers' Python ``int(ratio * n)``.
    """
    n = mask.sum().to(torch.float64)
    return (n * ratio).floor().clamp_min(1).to(torch.int64)


@torch.no_grad()
def top_k_mask(scores: Tensor, candidates: Tensor, k: Tensor) -> Tensor:
    """Bool mask of the ``k`` largest ``scores`` among ``candidates`` (all of them if fewer than ``k``).

    Args:
        scores: finite values where ``candidates`` holds, any shape.
        candidates: bool, same shape: the elements that may be chosen.
        k: 0-d integer tensor (on any device; compared on ``scores``' device).

    Ties are broken by flattened (row-major) position, earliest first. No host synchronisation.
    """
    flat = torch.where(
        candidates, scores, torch.full((), -torch.inf, dtype=scores.dtype, device=scores.device)
    )
    flat = flat.reshape(-1)
    order = torch.sort(flat, descending=True, stable=True).indices
    positions = torch.arange(flat.numel(), device=flat.device)
    rank = torch.empty_like(order).scatter_(0, order, positions)
    chosen = (rank < k.to(flat.device)) & candidates.reshape(-1)
    return chosen.reshape(candidates.shape)
