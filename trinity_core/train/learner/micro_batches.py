"""How an update's rows are cut: minibatches (row ranges) and micro-batches (by rows and by tokens)."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, pairwise

import torch
from torch import Tensor

__all__ = ["micro_batches", "row_ranges", "row_tokens"]


def row_ranges(n: int, parts: int) -> list[slice]:
    """``n`` rows cut into ``parts`` contiguous ranges as ``torch.tensor_split`` cuts them (the first
    ``n % parts`` ranges one row longer); slicing by a range gives views, an index tensor copies."""
    size, extra = divmod(n, parts)
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + size + (i < extra))
    return [slice(a, b) for a, b in pairwise(bounds)]


def row_tokens(attention_mask: Tensor | None, action_mask: Tensor, prompt_width: int) -> Tensor:
    """Tokens ``(B,)`` each row puts through the model: its prompt and response tokens.

    Without an attention mask (no prompt is padded) a row is the prompt width plus its response up to
    the last token the loss selects (right padding after it costs nothing that is counted).
    """
    if attention_mask is not None:
        return attention_mask.long().sum(-1)
    selected = action_mask != 0
    width = action_mask.shape[-1] - selected.flip(-1).long().argmax(-1)
    return prompt_width + torch.where(selected.any(-1), width, 0)


def micro_batches(
    rows: slice | Tensor, size: int | None, *, tokens: Tensor | None = None, max_tokens: int | None = None
) -> list[slice | Tensor]:
    """``rows`` (a range or an index tensor) cut into consecutive pieces of at most ``size`` rows and,
    with ``max_tokens``, at most ``max_tokens`` tokens (``tokens[i]``: row ``i``'s count, see
    :func:`row_tokens`); a row longer than the budget is a piece of its own. None: no such limit.

    The order of the rows is kept, so a range gives ranges (views). The loss does not depend on the cut:
    every piece is normalised by the counts of the whole step (``global_normalizers``).
    """
    if max_tokens is None or tokens is None:
        return _by_rows(rows, size)
    picked = tokens[rows].tolist()  # one host transfer per minibatch; the packing is host bookkeeping
    cum = list(accumulate(picked, initial=0))
    bounds = [0]
    while bounds[-1] < len(picked):
        start = bounds[-1]
        end = max(bisect_right(cum, cum[start] + max_tokens) - 1, start + 1)  # one packed piece
        bounds.append(end if size is None else min(end, start + size))
    if isinstance(rows, slice):
        return [slice(rows.start + a, rows.start + b) for a, b in pairwise(bounds)]
    return [rows[a:b] for a, b in pairwise(bounds)]


def _by_rows(rows: slice | Tensor, size: int | None) -> list[slice | Tensor]:
    """``rows`` cut into pieces of at most ``size`` rows (None: one piece)."""
    if isinstance(rows, slice):
        if size is None or rows.stop - rows.start <= size:
            return [rows]
        return [slice(i, min(i + size, rows.stop)) for i in range(rows.start, rows.stop, size)]
    if size is None or rows.numel() <= size:
        return [rows]
    return [*torch.split(rows, size)]
