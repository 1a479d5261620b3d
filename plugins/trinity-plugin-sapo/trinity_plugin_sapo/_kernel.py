"""The per-token part of the SAPO loss with its derivative, in one pass and without an autograd graph.

Two implementations of one contract (see :func:`sapo_eager_terms`):

* :func:`sapo_eager_terms`, the default path of ``SAPOPolicyLossFn``: about thirty in-place tensor
  operations on a few reused scratch buffers (:func:`~trinity_core.ops.fast.scratch_buffers`), chosen
  for CPU speed (no ``bool`` tensors in the hot path, ``exp2`` and ``sigmoid`` instead of the slower
  ``exp``). Why not plain torch: the same terms written plainly (:func:`sapo_token_terms` run eagerly)
  miss the eager speed target against trinity-rft 0.6.0 (``benchmarks/bench_losses.py``).
* :func:`sapo_token_terms`, written for ``torch.compile`` (``fused=True``, :data:`SAPO_KERNEL`): the
  compiler turns it into one loop over ``(B, T)`` that stores the local gradient and accumulates every
  row sum.

Both return ``q = A·(w/4)`` on selected tokens inside the ratio clamp (0 elsewhere), so that
``∂ℓ/∂logprob = GRAD_SCALE · q``; the constant stays out of the ``(B, T)`` pass.
"""

from __future__ import annotations

import math
from typing import Final

import torch
from torch import Tensor

from trinity_core.ops.fast import scratch_buffers
from trinity_core.ops.fused import CompiledKernel, aggregate_row_weights

__all__ = [
    "GRAD_SCALE",
    "METRIC_NAMES",
    "SAPO_KERNEL",
    "SIGMOID_EXP_CLAMP",
    "finish",
    "sapo_eager_terms",
    "sapo_fused_loss",
    "sapo_token_terms",
]

SIGMOID_EXP_CLAMP: Final[float] = 80.0
"""``exp(−x) <= e^τ`` in the fused kernel's sigmoid is taken of ``min(−x, 80)`` when a temperature exceeds
80 (else it cannot overflow): finite in float32, and below ``σ(x) ≈ 1.8e-35`` the gate and its weight
are 0 for every purpose."""

GRAD_SCALE: Final[float] = -4.0
"""``∂ℓ/∂logprob = GRAD_SCALE·q`` for the ``q = A·w/4`` both kernels return (``ℓ = −A·f(r)``,
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

_INT_OF_WIDTH: Final[dict[int, torch.dtype]] = {4: torch.int32, 8: torch.int64}


def sapo_eager_terms(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau_pos: float,
    tau_neg: float,
    log_ratio_clamp: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Row sums of ``ℓ = −A·f(r)``, the mask's row counts, the local gradient ``q`` and statistics.

    ``δ = clamp(logprob − old, ±log_ratio_clamp)`` on selected tokens (0 elsewhere), ``r = e^δ``, ``A``
    the selected advantages (0 elsewhere), ``τ = tau_pos`` where ``A > 0`` else ``tau_neg``,
    ``x = τ(r − 1)``, ``f = σ(x)·(4/τ)``, ``w = 4·σ(x)·σ(−x)·r`` (``= f'(r)·r``);
    ``q = A·w/4`` on selected tokens inside the clamp, 0 elsewhere, so ``∂ℓ/∂logprob = GRAD_SCALE·q``.
    Masked positions are cleared bit-exactly before any arithmetic (NaN or inf there reaches nothing).

    Returns:
        ``(row_loss (B,), row_count (B,), q (B, T), stats)`` in ``logprob``'s float type (at least
        float32); ``stats`` holds the selected sums ``[Σ −δ, Σ f, Σ r, Σ w, #(A > 0)]``. ``q`` is a
        fresh tensor; the temporaries live in :func:`~trinity_core.ops.fast.scratch_buffers`.
    """
    dtype = torch.promote_types(logprob.dtype, torch.float32)
    flags = mask if mask.dtype == torch.bool else mask != 0
    shape = logprob.shape
    raw, adv, coef, ratio, work, mask_f = scratch_buffers(6, shape, dtype, logprob.device)
    (bits,) = scratch_buffers(1, shape, _INT_OF_WIDTH[raw.element_size()], logprob.device)
    int_type = bits.dtype
    # Masked positions: every bit cleared (δ = A = +0), exactly torch.where(mask, x, 0) without a bool kernel.
    flag_bytes = flags.view(torch.uint8)  # a reinterpretation; copies from it are vectorised widenings
    bits.copy_(flag_bytes).neg_()  # all bits set on selected tokens (as mask_bits)
    mask_f.copy_(flag_bytes)
    row_count = mask_f.sum(dim=-1)
    torch.sub(logprob.to(dtype), old_logprob.to(dtype), out=raw).view(int_type).bitwise_and_(bits)
    torch.bitwise_and(advantages.to(dtype).view(int_type), bits, out=adv.view(int_type))
    positive = torch.gt(adv, 0, out=coef)  # 1.0 / 0.0: a float compare, many times faster than a bool one
    n_positive = positive.sum()
    delta = torch.clamp(raw, -log_ratio_clamp, log_ratio_clamp, out=ratio)
    delta_sum = delta.sum()
    inside = torch.eq(raw, delta, out=raw)  # 1.0 inside the clamp: the clamp passes the gradient there
    ratio = delta.mul_(_LOG2E).exp2_()
    ratio_sum = ratio.sum()
    # τ = tau_neg + (tau_pos − tau_neg)·[A > 0], then −x = τ − τ·r in place.
    neg_x = torch.mul(positive, tau_pos - tau_neg, out=work).add_(tau_neg).addcmul_(work, ratio, value=-1.0)
    # σ(x) and σ(−x) each by its own sigmoid: 1 − σ(−x) would lose digits where σ(x) is small.
    gate_q = torch.neg(neg_x).sigmoid_()  # σ(x); fresh, it becomes q
    sigmoid_neg_x = neg_x.sigmoid_()
    # −4/τ from the same flags, then −f = −4σ(x)/τ and ℓ = −A·f in place.
    neg_gate = positive.mul_(4.0 / tau_neg - 4.0 / tau_pos).sub_(4.0 / tau_neg).mul_(gate_q)
    neg_gate_sum = neg_gate.sum()
    row_loss = neg_gate.mul_(adv).sum(dim=-1)
    quarter_weight = gate_q.mul_(sigmoid_neg_x).mul_(ratio)  # w/4
    quarter_weight_sum = quarter_weight.sum()
    q = quarter_weight.mul_(inside.mul_(adv))
    # Unselected positions hold δ = 0, r = 1, A = 0, hence x = 0, σ = 1/2 exactly: f = 2/tau_neg and
    # w = 1 there. The sums above run over every position (cascade sums, no mask pass); subtracting
    # the unselected ones' exact share leaves the selected sums.
    unselected = raw.numel() - row_count.sum()
    stats = torch.stack(
        [
            -delta_sum,
            -neg_gate_sum - unselected * (2.0 / tau_neg),
            ratio_sum - unselected,
            4.0 * quarter_weight_sum - unselected,
            n_positive,
        ]
    )
    return row_loss, row_count, q, stats


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
    """:func:`sapo_eager_terms` written for ``torch.compile``: one loop, no materialised temporaries.

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
