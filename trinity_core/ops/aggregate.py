"""Reduce a per-token loss matrix ``(B, T)`` to the scalar that is back-propagated.

Modes (``v`` values, ``m`` mask, ``b`` rows with at least one selected token, ``S_b = Σ_t m·v``,
``n_b = Σ_t m``):

* ``token-mean``: ``Σ_b S_b / N_tok`` with ``N_tok = Σ m`` (DAPO / verl default);
* ``seq-mean-token-sum``: ``Σ_b S_b / N_seq``;
* ``seq-mean-token-mean``: ``Σ_b (S_b / n_b) / N_seq`` (GRPO paper);
* ``seq-mean-token-sum-norm``: ``Σ_b S_b / (N_seq · max_tokens)`` (Dr. GRPO: the token sum of each
  sequence divided by a configured constant ``max_tokens``, typically the generation budget, then
  averaged over sequences);
* ``token-sum``: ``Σ_b S_b · world_size`` (verl 0.9.1: no token or sequence normaliser; the loss is the
  plain sum of the selected per-token values).

``N_seq`` counts only rows with at least one selected token: fully masked rows are excluded from the
sequence mean, as in verl (the reference counts them as zeros). Empty counts are clamped to 1, so an
all-masked batch gives a loss of exactly 0.

Global normalisation. By default ``N_tok`` and ``N_seq`` are the counts of this call's ``mask``, which
makes the loss depend on how a batch is cut into micro-batches and ranks (as in trinity-rft 0.6.0). Pass
``normalizer`` (= the token count of the whole optimizer step, summed over micro-batches *and* ranks) and
``seq_normalizer`` (= the sequence count likewise) to divide the local sum by the global count instead;
:func:`trinity_core.ops.global_normalizers` computes both. The convention is then:

* gradient accumulation: **sum** the micro-batch losses (do not divide by the number of micro-batches,
  and do not let ``Accelerator`` scale by ``gradient_accumulation_steps``);
* data parallelism: the loss is multiplied by ``world_size``, because DDP/FSDP *average* gradients over
  ranks; ``mean_ranks(world_size · Σ_local / N_global) = Σ_global / N_global``.

With that convention the accumulated, all-reduced gradient equals the gradient of the whole batch
aggregated in one call. ``world_size`` multiplies only a term that uses a global normalizer, except in
``token-sum``: that mode has no normaliser, so its loss is always multiplied by ``world_size`` (as verl
does with ``dp_size``); summed over micro-batches and averaged over ranks, the gradient is the sum over
every selected token of the whole batch. ``world_size`` is 1 by default, so one process gets the plain
masked sum.
"""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

from trinity_core.ops.masked import masked_sum

__all__ = ["LOSS_AGG_MODES", "aggregate_loss"]

LOSS_AGG_MODES: Final[tuple[str, ...]] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "token-sum",
)
"""The valid ``loss_agg_mode`` names: the reference's four, in its order, then verl's ``token-sum``."""

Count = Tensor | float | int


def _denominator(
    local: Tensor, global_count: Count | None, world_size: int, dtype: torch.dtype
) -> tuple[Tensor, float]:
    """Return ``(max(count, 1), factor)`` where count is global when given, else ``local``.

    ``factor`` is ``world_size`` for a global count (see the module docstring) and ``1`` otherwise.
    """
    if global_count is None:
        return local.to(dtype).clamp_min(1), 1.0
    count = torch.as_tensor(global_count, device=local.device).to(dtype)
    return count.clamp_min(1), float(world_size)


def aggregate_loss(
    values: Tensor,
    mask: Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    normalizer: Count | None = None,
    seq_normalizer: Count | None = None,
    max_tokens: float | None = None,
    world_size: int = 1,
) -> Tensor:
    """Aggregate the per-token ``values`` ``(..., T)`` selected by ``mask`` into a 0-d loss.

    Args:
        values: per-token losses, shape ``(B, T)`` (any leading shape is flattened into rows).
        mask: same shape; non-zero / True selects a token (e.g. ``action_mask``).
        loss_agg_mode: one of :data:`LOSS_AGG_MODES` (formulas in the module docstring).
        normalizer: global token count ``N_tok`` for ``token-mean`` (ignored by the other modes).
        seq_normalizer: global count ``N_seq`` of sequences with at least one selected token, for the
            three ``seq-mean-*`` modes (ignored by ``token-mean`` and ``token-sum``).
        max_tokens: the constant of ``seq-mean-token-sum-norm`` (required there; Dr. GRPO uses the
            maximum response length). It is never inferred from the padded width ``T``, which would
            change with the batch's padding.
        world_size: number of data-parallel ranks whose gradients are averaged; multiplies the loss
            when a global normalizer is used, and always in ``token-sum`` (see the module docstring).

    Returns:
        A 0-d tensor on ``values``' device, in ``values``' dtype (sums and the division run in at least
        float32). NaN/inf at masked positions do not reach the result or its gradient.

    Raises:
        ValueError: unknown mode, mismatched shapes, ``max_tokens`` missing or not positive for
            ``seq-mean-token-sum-norm``, or ``world_size < 1``.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"aggregate_loss: unknown loss_agg_mode {loss_agg_mode!r}; valid modes are "
            f"{', '.join(LOSS_AGG_MODES)}"
        )
    if values.dim() == 0 or values.shape != mask.shape:
        raise ValueError(
            f"aggregate_loss: values {tuple(values.shape)} and mask {tuple(mask.shape)} must have the same "
            "shape with a last (token) dimension, e.g. (B, T)"
        )
    if world_size < 1:
        raise ValueError(f"aggregate_loss: world_size must be >= 1, got {world_size}")
    horizon = 1.0
    if loss_agg_mode == "seq-mean-token-sum-norm":
        if max_tokens is None or not max_tokens > 0:
            raise ValueError(
                "aggregate_loss: loss_agg_mode 'seq-mean-token-sum-norm' needs max_tokens > 0 (the Dr. GRPO "
                f"constant, e.g. the maximum response length), got {max_tokens!r}"
            )
        horizon = float(max_tokens)

    acc = torch.promote_types(values.dtype, torch.float32)
    m = mask if mask.dtype == torch.bool else mask != 0
    v = values.to(acc).reshape(-1, values.shape[-1])
    m = m.reshape(-1, values.shape[-1])

    if loss_agg_mode == "token-mean":
        denom, factor = _denominator(m.sum(), normalizer, world_size, acc)
        loss = masked_sum(v, m) / denom * factor
    elif loss_agg_mode == "token-sum":
        loss = masked_sum(v, m) * float(world_size)
    else:
        row_sum = masked_sum(v, m, dim=-1)
        row_count = m.sum(dim=-1)
        denom, factor = _denominator((row_count > 0).sum(), seq_normalizer, world_size, acc)
        if loss_agg_mode == "seq-mean-token-mean":
            # Empty rows have row_sum 0, so they add nothing; clamping avoids 0/0.
            total = (row_sum / row_count.to(acc).clamp_min(1)).sum()
        else:
            total = row_sum.sum()
        loss = total / (denom * horizon) * factor
    return loss.to(values.dtype)
