"""Vectorized REINFORCE-family arithmetic on padded ``(N, R)`` tensors (no Python loop, no host sync).

Notation: ``r_t`` the reward of response token ``t`` (zero outside the real response), ``m_t`` the action
mask (the tokens the policy produced), ``γ`` the discount, ``g(i)`` the task group of experience ``i``.

Returns with masked recursion (:func:`discounted_returns`). Only action tokens are decisions, so the
discount applies between consecutive action tokens; a reward on a non-action token (an environment token
of a multi-turn response) belongs to the action token before it, undiscounted::

    H_t = r_t + d_t · H_{t+1},   d_t = γ if m_{t+1} else 1,   H_R = 0.

For a response whose action mask has no holes this is the textbook ``G_t = Σ_{k≥t} γ^{k−t} r_k``, which is
what trinity-rft 0.6.0 and verl compute; they differ only on masked tokens (the reference discounts
through them, verl restarts the return at each of them, cutting later turns' rewards off earlier turns).
The recursion is evaluated as a parallel suffix scan in ``⌈log2 R⌉`` vectorized steps, in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trinity_core.ops import group_stats, masked_sum, segment_count

__all__ = ["discounted_returns", "leave_one_out", "sequence_scores"]


def _shift_left(x: Tensor, offset: int) -> Tensor:
    """``y[:, t] = x[:, t + offset]`` with zeros past the end."""
    out = torch.zeros_like(x)
    out[:, : x.shape[1] - offset] = x[:, offset:]
    return out


def discounted_returns(rewards: Tensor, response_mask: Tensor, action_mask: Tensor, gamma: float) -> Tensor:
    """``H`` ``(N, R)`` float64 of the masked recursion in the module docstring.

    ``rewards`` is read only where ``response_mask`` holds (NaN or inf elsewhere never reaches the
    result). Positions outside ``action_mask`` carry the running sum; callers mask them.
    """
    if rewards.dim() != 2 or rewards.shape != response_mask.shape or rewards.shape != action_mask.shape:
        raise ValueError(
            f"discounted_returns: rewards {tuple(rewards.shape)}, response_mask {tuple(response_mask.shape)} "
            f"and action_mask {tuple(action_mask.shape)} must all be (N, R)"
        )
    r = torch.where(response_mask.bool(), rewards.to(torch.float64), 0.0)
    width = r.shape[1]
    if width == 0:
        return r
    next_is_action = _shift_left(action_mask.bool(), 1)
    d = torch.ones_like(r).masked_fill(next_is_action, gamma)
    # Suffix scan: after the step with offset s, h_t sums the window [t, t + 2s) and a_t is its discount.
    h, a = r, d
    offset = 1
    while offset < width:
        h = h + a * _shift_left(h, offset)
        a = a * _shift_left(a, offset)
        offset *= 2
    return h


def sequence_scores(token_scores: Tensor, response_mask: Tensor) -> Tensor:
    """Outcome score of each response, ``s_i = Σ_t r_{i,t}`` over its real tokens: ``(N,)`` float64."""
    return masked_sum(token_scores.to(torch.float64), response_mask.bool(), dim=-1)


def leave_one_out(scores: Tensor, index: Tensor, num_groups: int) -> tuple[Tensor, Tensor]:
    """RLOO advantages ``(N,)`` float64 and the group size of each experience ``(N,)`` int64.

    ``A_i = s_i − mean_{j ∈ g(i), j ≠ i} s_j = n/(n−1) · (s_i − mean_{g(i)} s)`` for a group of ``n ≥ 2``;
    ``A_i = 0`` for a singleton (no other sample to compare with). The group mean is exact for equal
    scores, so a zero-variance group gets exactly 0.
    """
    stats = group_stats(scores, index, num_groups)
    n = segment_count(index, num_groups)[index]
    centred = scores.to(torch.float64) - stats.mean[index]
    nf = n.to(torch.float64)
    factor = nf / (nf - 1).clamp_min(1)
    return torch.where(n > 1, centred * factor, 0.0), n
