"""Cut a micro-batch to the tokens it needs before its forward pass (the learner's padding trim).

A step's batch is as wide as its longest prompt plus its longest response. A micro-batch of fewer rows
often needs less: its own longest (left-padded) prompt and the last response column its loss selects.
The columns cut away are padding or masked out, so the loss and its gradient are those of the uncut rows
(the normalizers are the step's global counts, which do not depend on the width); when no prompt of the
micro-batch is padded any more, the attention mask is dropped and the model takes its plain causal path.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["Trimmed", "trim_micro_batch"]


@dataclass
class Trimmed:
    """A micro-batch cut to ``prompt_width`` prompt and ``R`` response columns."""

    input_ids: Tensor
    """``(b, prompt_width + R)`` token ids."""
    attention_mask: Tensor | None
    """Same shape, or None when no prompt is padded (the plain causal path)."""
    prompt_width: int
    columns: dict[str, Tensor]
    """The per-token columns ``(b, R)`` cut to ``R``; per-row columns unchanged."""


def trim_micro_batch(
    input_ids: Tensor, attention_mask: Tensor | None, prompt_width: int, columns: dict[str, Tensor]
) -> Trimmed:
    """``input_ids`` ``(b, P + R)`` and ``columns`` cut to the micro-batch's own widths.

    The prompt keeps its longest row's tokens (left padding beyond it is dropped); the response keeps
    the columns up to the last one ``columns["action_mask"]`` selects in any row (at least one), right
    padding after it cannot affect earlier positions under causal attention. A column is per-token when
    it is 2-d with the response width ``R``; those are cut, the others are passed as they are.
    """
    P, R = prompt_width, input_ids.shape[1] - prompt_width
    selected = columns["action_mask"] != 0
    last = selected.flip(-1).long().argmax(-1)  # distance from the end to each row's last selected column
    width = max(int(((R - last) * selected.any(-1)).max()), 1)  # one host transfer per micro-batch
    p = P
    if attention_mask is not None:
        lengths = attention_mask[:, :P].long().sum(-1)
        p, shortest = int(lengths.max()), int(lengths.min())
        if attention_mask[:, : P - p].any():  # not left-padded (a hole in a prompt): keep every column
            p = P
        attention_mask = attention_mask[:, P - p : P + width] if shortest < p else None
    ids = input_ids[:, P - p : P + width]
    cut = {k: v[:, :width] if v.dim() == 2 and v.shape[1] == R else v for k, v in columns.items()}
    return Trimmed(ids, attention_mask, p, cut)
