"""The per-token part of the SAPO loss with its derivative, in one pass and without an autograd graph.

:func:`sapo_token_terms` runs eagerly (the default path of ``SAPOPolicyLossFn``) or compiled by
``torch.compile`` into one C++ loop (``fused=True``, :data:`SAPO_KERNEL`).
"""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

from trinity_core.ops.fused import CompiledKernel, as_flags, as_float, mask_bits, select, weighted_sum

__all__ = ["SAPO_KERNEL", "SIGMOID_EXP_CLAMP", "sapo_token_terms"]

SIGMOID_EXP_CLAMP: Final[float] = 80.0
"""``exp(−x)`` in the gate's sigmoid is taken of ``min(−x, 80)``: finite in float32, and below
``σ(x) ≈ 1.8e-35`` the gate and its weight are 0 for every purpose."""


def sapo_token_terms(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau_pos: float,
    tau_neg: float,
    log_ratio_clamp: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Row sums of ``ℓ = −A·f(r)``, the mask's row counts, ``∂ℓ/∂logprob`` and statistics.

    ``δ = clamp(logprob − old, ±log_ratio_clamp)`` on selected tokens (0 elsewhere), ``r = e^δ``, ``A``
    the selected advantages (0 elsewhere), ``τ = tau_pos`` where ``A > 0`` else ``tau_neg``,
    ``x = τ(r − 1)``, ``f = σ(x)·(4/τ)``, ``w = 4·σ(x)·σ(−x)·r`` (``= f'(r)·r``);
    ``∂ℓ/∂logprob = −A·w`` on selected tokens inside the clamp, 0 elsewhere.

    Returns:
        ``(row_loss (B,), row_count (B,), local_grad (B, T), stats)`` in ``logprob``'s float type (at
        least float32); ``stats`` holds the selected sums ``[Σ −δ, Σ f, Σ r, Σ w, #(A > 0)]``.
    """
    dtype = torch.promote_types(logprob.dtype, torch.float32)
    mask, mask_f = as_flags(mask, dtype)
    bits = None if torch.compiler.is_compiling() else mask_bits(mask, dtype)
    raw = select(logprob.to(dtype) - old_logprob.to(dtype), mask, bits)
    delta = raw.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(delta)
    adv = select(advantages.to(dtype), mask, bits)
    positive = as_float(adv > 0, dtype)
    negative = 1 - positive
    pos_t = torch.tensor(tau_pos, dtype=dtype, device=adv.device)
    neg_t = torch.tensor(tau_neg, dtype=dtype, device=adv.device)
    # p·a + (1 − p)·b with p ∈ {0, 1} is exactly a or b (one product is 0): a float torch.where.
    tau = positive * pos_t + negative * neg_t
    scale = positive * (4.0 / pos_t) + negative * (4.0 / neg_t)
    x = tau * (ratio - 1)
    # One exp gives both σ(x) = 1/(1 + e) and σ(−x) = e·σ(x), e = exp(−x), neither by cancellation
    # (1 − σ(x) loses all digits for large x). −x = τ(1 − r) <= τ; the clamp keeps e finite for any τ.
    e = torch.exp((-x).clamp_max(SIGMOID_EXP_CLAMP))
    s = 1 / (1 + e)
    gate = s * scale
    weight = 4.0 * s * (e * s) * ratio
    neg_adv = -adv
    per_token = neg_adv * gate
    local_grad = neg_adv * weight * as_float(delta == raw, dtype)

    # Row sums first, so that a compiler fuses every reduction into one pass over (B, T).
    stats = torch.stack(
        [
            -delta.sum(dim=-1).sum(),
            weighted_sum(gate, mask_f),
            weighted_sum(ratio, mask_f),
            weighted_sum(weight, mask_f),
            positive.sum(dim=-1).sum(),
        ]
    )
    return per_token.sum(dim=-1), mask_f.sum(dim=-1), local_grad, stats


SAPO_KERNEL: Final[CompiledKernel] = CompiledKernel(sapo_token_terms)
""":func:`sapo_token_terms` compiled by ``torch.compile`` on first use (eager fallback without a compiler)."""
