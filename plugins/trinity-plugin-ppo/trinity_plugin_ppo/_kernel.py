"""The ``fused=True`` path of the PPO loss: the per-token terms with their derivative, in one pass and
without an autograd graph, compiled by ``torch.compile`` into one C++ loop (:data:`PPO_KERNEL`).

The default path of ``PPOPolicyLossFn`` does not use this module: it writes the formula in plain torch
and lets autograd differentiate it. The derivative here is the one autograd takes through that formula,
including its conventions at ties: ``torch.maximum`` / ``torch.minimum`` split the gradient in halves
between equal operands; ``clamp`` passes it on ``[lo, hi]`` inclusive. Tests compare the two paths in
value and gradient.
"""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

from trinity_core.ops.fused import CompiledKernel, as_flags

__all__ = ["PPO_KERNEL", "SEQUENCE_KL_EPS", "ppo_token_terms"]

SEQUENCE_KL_EPS: Final[float] = 1e-10
"""Added to each row's token count in the sequence-masking KL (as the reference)."""


def _tie_weight(first: Tensor, second: Tensor, dtype: torch.dtype) -> Tensor:
    """``1`` where ``first > second``, ``0.5`` where equal, ``0`` below: the share of ``max``'s gradient."""
    return (first > second).to(dtype) + 0.5 * (first == second).to(dtype)


def ppo_token_terms(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float,
    log_ratio_clamp: float,
    sequence_kl_threshold: float | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Row sums of the PPO per-token loss ``ℓ``, the mask's row counts, ``∂ℓ/∂logprob`` and statistics.

    With ``δ = clamp(logprob − old, ±log_ratio_clamp)`` on selected tokens (0 elsewhere), ``r = e^δ``,
    ``A`` the selected advantages (0 elsewhere): ``ℓ1 = −A r``, ``ℓ2 = −A clip(r, 1 − lo, 1 + hi)``,
    ``C1 = max(ℓ1, ℓ2)``, ``ℓ = min(C1, −A c)`` where ``A < 0`` else ``C1``; with a
    ``sequence_kl_threshold`` ``κ``, ``ℓ = 0`` for ``A < 0`` in rows whose mean ``−δ`` exceeds ``κ``.
    ``∂ℓ/∂logprob = ∂ℓ/∂r · r`` on selected tokens inside the clamp, 0 elsewhere.

    For the plain policy gradient pass ``old_logprob = logprob`` (then ``δ = 0``, ``r = 1``, and the
    derivative is ``−A``).

    Returns:
        ``(row_loss (B,), row_count (B,), local_grad (B, T), stats)`` in ``logprob``'s float type (at
        least float32); ``stats`` holds ``[#(ℓ2 > ℓ1), #(A < 0 and C1 > −A c), Σ −δ]`` and, with
        sequence masking, ``[#dropped, Σ_b kl_b over non-empty rows, #non-empty rows]``.
    """
    dtype = torch.promote_types(logprob.dtype, torch.float32)
    mask, mask_f = as_flags(mask, dtype)
    zero = torch.zeros((), dtype=dtype, device=logprob.device)
    raw = torch.where(mask, logprob.to(dtype) - old_logprob.to(dtype), zero)
    delta = raw.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(delta)
    neg_adv = -torch.where(mask, advantages.to(dtype), zero)
    negative = neg_adv > 0
    loss1 = neg_adv * ratio
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss2 = neg_adv * clipped_ratio
    clipped = torch.maximum(loss1, loss2)
    loss3 = neg_adv * clip_ratio_c
    per_token = torch.where(negative, torch.minimum(clipped, loss3), clipped)

    # ∂C1/∂r: ℓ1's share of the max times −A, plus ℓ2's share times −A inside the clip range.
    w1 = _tie_weight(loss1, loss2, dtype)
    w2 = _tie_weight(loss2, loss1, dtype)
    d_ratio = neg_adv * (w1 + w2 * (clipped_ratio == ratio).to(dtype))
    # Dual clip: min(C1, ℓ3) passes C1's gradient below ℓ3, half at a tie; A >= 0 passes all of it.
    negative_f = negative.to(dtype)
    dual = _tie_weight(loss3, clipped, dtype)
    d_ratio = d_ratio * (1.0 + negative_f * (dual - 1.0))
    local_grad = d_ratio * ratio * (delta == raw).to(dtype)

    row_count = mask_f.sum(dim=-1)
    # Row sums first, so a compiler fuses every reduction into one pass over the (B, T) inputs.
    counts = [
        (loss2 > loss1).to(dtype).sum(dim=-1),
        ((clipped > loss3).to(dtype) * negative_f).sum(dim=-1),
        -delta.sum(dim=-1),
    ]
    if sequence_kl_threshold is not None:
        row_kl = (-delta).sum(dim=-1) / (row_count + SEQUENCE_KL_EPS)
        drop = negative & (row_kl > sequence_kl_threshold).unsqueeze(-1)
        per_token = torch.where(drop, zero, per_token)
        keep_f = 1.0 - drop.to(dtype)
        local_grad = local_grad * keep_f
        nonempty = (row_count > 0).to(dtype)
        counts += [drop.to(dtype).sum(dim=-1), row_kl * nonempty, nonempty]
    return per_token.sum(dim=-1), row_count, local_grad, torch.stack(counts).sum(dim=-1)


PPO_KERNEL: Final[CompiledKernel] = CompiledKernel(ppo_token_terms)
""":func:`ppo_token_terms` compiled by ``torch.compile`` on first use (eager fallback without a compiler)."""
