"""The ``fused=True`` path of the SAPO loss: the per-token terms with their derivative and the metric
sums, in one pass and without an autograd graph, compiled by ``torch.compile`` (:data:`SAPO_KERNEL`).

The default path of ``SAPOPolicyLossFn`` does not use this module: it writes the formula in plain torch
and lets autograd differentiate it. :func:`sapo_token_terms` is written for the compiler, which turns it
into one loop over ``(B, T)`` that stores the local gradient and accumulates every row sum. It returns
``q = A·(w/4)`` on selected tokens inside the ratio clamp (0 elsewhere), so that
``∂ℓ/∂logprob = GRAD_SCALE · q``; the constant stays out of the ``(B, T)`` pass. Tests compare the two
paths in value and gradient.
"""

from __future__ import annotations

import math
from typing import Final

import torch
from torch import Tensor

from trinity_core.ops.fused import CompiledKernel, aggregate_row_weights

__all__ = [
    "GRAD_SCALE",
    "METRIC_NAMES",
    "SAPO_KERNEL",
    "SIGMOID_EXP_CLAMP",
    "finish",
    "sapo_fused_loss",
    "sapo_token_terms",
]

SIGMOID_EXP_CLAMP: Final[float] = 80.0
"""``exp(−x) <= e^τ`` in the fused kernel's sigmoid is taken of ``min(−x, 80)`` when a temperature exceeds
80 (else it cannot overflow): finite in float32, and below ``σ(x) ≈ 1.8e-35`` the gate and its weight
are 0 for every purpose."""

GRAD_SCALE: Final[float] = -4.0
"""``∂ℓ/∂logprob = GRAD_SCALE·q`` for the ``q = A·w/4`` the kernel returns (``ℓ = −A·f(r)``,
``w = f'(r)·r``)."""

METRIC_NAMES: Final[tuple[str, ...]] = (
    "sapo_loss",
    "ppo_kl",
    "avg_soft_gate",
    "avg_ratio",
    "avg_grad_weight",
    "pos_adv_frac",
)
"""The metrics, in the order of the ``values`` of :func:`finish`."""

_LOG2E: Final[float] = 1.0 / math.log(2.0)
"""``e^y = 2^(y·log2 e)``: on CPU ``torch.exp2`` is several times faster than ``torch.exp``."""


def sapo_token_terms(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    row_ones: Tensor,
    tau_pos: float,
    tau_neg: float,
    log_ratio_clamp: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Row sums of ``ℓ = −A·f(r)``, the mask's row counts, the local gradient ``q`` and statistics, written
    for ``torch.compile``: one loop, no materialised temporaries.

    ``δ = clamp(logprob − old, ±log_ratio_clamp)`` on selected tokens (0 elsewhere), ``r = e^δ``, ``A``
    the selected advantages (0 elsewhere), ``τ = tau_pos`` where ``A > 0`` else ``tau_neg``,
    ``x = τ(r − 1)``, ``f = σ(x)·(4/τ)``, ``w = 4·σ(x)·σ(−x)·r`` (``= f'(r)·r``);
    ``q = A·w/4`` on selected tokens inside the clamp, 0 elsewhere. Returns
    ``(row_loss (B,), row_count (B,), q (B, T), stats)`` in ``logprob``'s float type (at least float32);
    ``stats`` holds the selected sums ``[Σ −δ, Σ f, Σ r, Σ w, #(A > 0)]``.

    ``mask`` is 0/1 in any dtype (a float mask loads fastest in compiled CPU code). ``row_ones`` is a
    ``(B, 1)`` tensor of ones that scales ``q``: reading a per-row operand keeps the compiler's loop
    nest two-dimensional, so the store of ``q`` and the row sums share one loop (a flattened
    ``(B·T,)`` store cannot fuse with ``(B,)×(T,)`` reductions). For the same reason ``q``'s own row
    sum is taken (and dropped): the compiler fuses a pointwise result into a later reduction, not into
    an earlier one, and this puts ``q`` first. ``exp2`` stands for ``exp`` throughout: on CPU the
    compiler re-materialises a reused ``exp``/``sigmoid`` result as a ``(B, T)`` buffer, an ``exp2``
    one it recomputes in registers.
    """
    dtype = torch.promote_types(logprob.dtype, torch.float32)
    selected = mask != 0
    mask_f = mask.to(dtype)
    zero = torch.zeros((), dtype=dtype, device=logprob.device)
    raw = torch.where(selected, logprob.to(dtype) - old_logprob.to(dtype), zero)
    delta = raw.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp2(delta * _LOG2E)
    adv = torch.where(selected, advantages.to(dtype), zero)
    positive = adv > 0
    # e = exp(−x) = 2^(τ·log2(e)·(1 − r)) <= e^τ; σ(x) = 1/(1 + e) and σ(−x) = e·σ(x), neither by
    # cancellation. The exponent needs a clamp only for τ > SIGMOID_EXP_CLAMP (a trace-time branch).
    # (zero + c: a 0-d constant of `dtype`; torch.where of two Python floats would be float32.)
    exponent = torch.where(positive, zero + tau_pos * _LOG2E, zero + tau_neg * _LOG2E) * (1 - ratio)
    if max(tau_pos, tau_neg) > SIGMOID_EXP_CLAMP:
        exponent = exponent.clamp_max(SIGMOID_EXP_CLAMP * _LOG2E)
    e = torch.exp2(exponent)
    s = 1 / (1 + e)
    neg_gate = s * torch.where(positive, zero - 4.0 / tau_pos, zero - 4.0 / tau_neg)  # −f
    quarter_weight = s * (e * s) * ratio
    q = torch.where(delta == raw, adv * quarter_weight, zero) * row_ones.to(dtype)
    rows = torch.stack(
        [
            q.sum(dim=-1),
            (adv * neg_gate).sum(dim=-1),
            mask_f.sum(dim=-1),
            -delta.sum(dim=-1),
            -(neg_gate * mask_f).sum(dim=-1),
            (ratio * mask_f).sum(dim=-1),
            4.0 * (quarter_weight * mask_f).sum(dim=-1),
            positive.to(dtype).sum(dim=-1),
        ]
    )
    return rows[1], rows[2], q, rows[3:].sum(dim=-1)


def finish(
    row_loss: Tensor,
    row_count: Tensor,
    stats: Tensor,
    loss_agg_mode: str,
    normalizer: Tensor | None,
    seq_normalizer: Tensor | None,
    max_tokens: float | None,
    world_size: int,
) -> tuple[Tensor, Tensor]:
    """``(row_coef, values)``: ``GRAD_SCALE·c`` ``(B,)`` for the aggregation weights ``c`` of the rows, and
    ``values`` ``(6,)``: the loss ``Σ_b c_b·row_loss_b`` and the selected means of ``stats``, in the order
    of :data:`METRIC_NAMES`. ``∂loss/∂logprob_bt = row_coef_b·q_bt``.

    The trailing arguments are those of ``LossAggregation.aggregation()``.
    """
    weights = aggregate_row_weights(
        row_count,
        loss_agg_mode,
        normalizer=normalizer,
        seq_normalizer=seq_normalizer,
        max_tokens=max_tokens,
        world_size=world_size,
    )
    loss = (weights * row_loss).sum()
    values = torch.cat([loss.unsqueeze(0), stats / row_count.sum().clamp_min(1)])
    return weights * GRAD_SCALE, values


def sapo_fused_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    row_ones: Tensor,
    tau_pos: float,
    tau_neg: float,
    log_ratio_clamp: float,
    loss_agg_mode: str,
    normalizer: Tensor | None,
    seq_normalizer: Tensor | None,
    max_tokens: float | None,
    world_size: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`sapo_token_terms` then :func:`finish`, for one compiled graph: ``(q, row_coef, values)``."""
    row_loss, row_count, q, stats = sapo_token_terms(
        logprob, old_logprob, advantages, mask, row_ones, tau_pos, tau_neg, log_ratio_clamp
    )
    row_coef, values = finish(
        row_loss, row_count, stats, loss_agg_mode, normalizer, seq_normalizer, max_tokens, world_size
    )
    return q, row_coef, values


SAPO_KERNEL: Final[CompiledKernel] = CompiledKernel(sapo_fused_loss)
""":func:`sapo_fused_loss` compiled by ``torch.compile`` on first use (eager fallback without a compiler)."""
