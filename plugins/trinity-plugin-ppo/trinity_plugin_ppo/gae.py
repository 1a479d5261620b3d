"""Generalised advantage estimation over padded, masked rows, as a parallel scan (no loop over time steps)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_gae", "reverse_linear_scan"]


def reverse_linear_scan(a: Tensor, b: Tensor) -> Tensor:
    """Solve ``x_t = b_t + a_t · x_{t+1}`` backwards along the last dimension, with ``x_T = 0``.

    Hillis–Steele doubling: after the step with offset ``d`` each position holds the affine map from
    ``x_{t+2d}`` to ``x_t`` (``(A, B) ∘ (A', B') = (A·A', B + A·B')``), so ``⌈log2 T⌉`` vectorised
    steps replace ``T`` sequential ones. Only products of the ``a`` are formed (no division), so
    ``a < 1`` underflows harmlessly to 0 on long rows.
    """
    if a.shape != b.shape:
        raise ValueError(
            f"reverse_linear_scan: a {tuple(a.shape)} and b {tuple(b.shape)} must have one shape"
        )
    width = a.shape[-1]
    coef, acc = a, b
    offset = 1
    while offset < width:
        pad = [*list(coef.shape[:-1]), offset]
        coef_next = torch.cat((coef[..., offset:], coef.new_ones(pad)), dim=-1)
        acc_next = torch.cat((acc[..., offset:], acc.new_zeros(pad)), dim=-1)
        acc = acc + coef * acc_next
        coef = coef * coef_next
        offset *= 2
    return acc


def masked_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """GAE advantages and returns ``(B, T)`` in float64 over the selected tokens of each row.

    Masked positions (padding, and observation tokens inside a multi-turn response) are skipped: with
    ``next(t)`` the next selected position after ``t`` in the same row,

        ``δ_t = r_t + γ·V_{next(t)} − V_t``  (``V_{next(t)} = 0`` after the last selected token),
        ``A_t = δ_t + γλ·A_{next(t)}``,      ``G_t = A_t + V_t``,

    so values, rewards and advantages stored at masked positions take no part, and the discount counts
    action tokens only (verl's ``compute_gae_advantage_return``). Rewards placed on masked positions
    are ignored. Both outputs are exactly 0 at masked positions.
    """
    m = mask if mask.dtype == torch.bool else mask != 0
    zero = torch.zeros((), dtype=torch.float64, device=rewards.device)
    r = torch.where(m, rewards.to(torch.float64), zero)
    v = torch.where(m, values.to(torch.float64), zero)
    # V_{next(t)} is carried backwards through masked positions:
    # x_t = m_{t+1} V_{t+1} + (1 − m_{t+1}) x_{t+1}.
    m_next = torch.cat((m[..., 1:], torch.zeros_like(m[..., :1])), dim=-1)
    v_next = torch.cat((v[..., 1:], torch.zeros_like(v[..., :1])), dim=-1)
    next_value = reverse_linear_scan((~m_next).to(torch.float64), v_next)
    delta = torch.where(m, r + gamma * next_value - v, zero)
    decay = torch.where(m, torch.full_like(delta, gamma * lam), torch.ones_like(delta))
    advantages = torch.where(m, reverse_linear_scan(decay, delta), zero)
    returns = torch.where(m, advantages + v, zero)
    return advantages, returns
