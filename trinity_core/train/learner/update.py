"""The pieces of the learner's update: log-probs of responses, the optimizer and its schedule, row ranges.

Plain functions the :class:`~trinity_core.train.learner.learner.Learner` composes; nothing here holds state.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, pairwise
from typing import Any

import torch
from torch import Tensor

from trinity_core.config import TrainerConfig
from trinity_core.lm.forward_call import forward_parameters, model_under_wrappers
from trinity_core.lm.shared_prompt import shared_prompt_logits

__all__ = [
    "lr_scheduler",
    "make_optimizer",
    "micro_batches",
    "response_logprobs",
    "row_ranges",
    "row_tokens",
]


def response_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    prompt_width: int,
    with_entropy: bool,
    entropy_grad: bool = True,
    share_prompts: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``(B, R)`` of the response tokens ``input_ids[:, P:]`` (and per-token entropy).

    Position ids follow the attention mask, as in ``generate`` with left-padded prompts. Pass
    ``attention_mask=None`` when no prompt is padded: right padding after the responses cannot affect
    earlier positions under causal attention, and without a mask the model takes its faster plain causal path.

    Only the ``R`` positions that predict response tokens go through the LM head (``logits_to_keep``), and
    ``log p(y) = z_y - logsumexp(z)`` reads the logits without a second ``(B, R, V)`` log-softmax tensor
    (autograd keeps no copy of the vocabulary for the gather either); the entropy
    ``logsumexp(z) - sum softmax(z) z`` needs one soft-max only when asked for, and is computed without
    autograd when ``entropy_grad`` is False (an entropy coefficient of 0: the entropy is only a metric, and
    its zero gradient would cost a backward pass through a ``(B, R, V)`` soft-max).

    With ``share_prompts``, rows that repeat a prompt run it once
    (:func:`~trinity_core.lm.shared_prompt.shared_prompt_logits`) where the model allows.
    """
    logits = shared_prompt_logits(model, input_ids, attention_mask, prompt_width) if share_prompts else None
    if logits is None:
        width = input_ids.shape[1] - prompt_width + 1
        kwargs: dict[str, Any] = {"logits_to_keep": width} if _keeps_logits(model) else {}
        if attention_mask is not None:
            kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
            kwargs["attention_mask"] = attention_mask.long()
        logits = model(input_ids=input_ids, **kwargs).logits[:, -width:-1]
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, input_ids[:, prompt_width:, None].long()).squeeze(-1) - lse
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
            entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, entropy


def _keeps_logits(model: Any) -> bool:
    """Whether the model under ``model``'s wrappers accepts ``logits_to_keep`` (a sharded engine holds it
    as ``module`` and passes keywords on)."""
    inner = model_under_wrappers(model)
    return "logits_to_keep" in forward_parameters(getattr(inner, "module", inner))


def lr_scheduler(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int) -> Any:
    """The learning-rate schedule ``kind`` (constant, linear, cosine) from ``transformers.get_scheduler``.

    The factor on ``trainer.lr`` at 0-based step ``s``, warm-up ``W`` and ``T`` total steps: ``s / W``
    while ``s < W``, then 1 (constant), ``(T - s) / (T - W)`` (linear) or
    ``(1 + cos(pi * (s - W) / (T - W))) / 2`` (cosine).
    """
    from transformers import get_scheduler

    # transformers' "constant" ignores the warm-up; "constant_with_warmup" with W = 0 is the same constant.
    name = "constant_with_warmup" if kind == "constant" else kind
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)


def make_optimizer(model: Any, tcfg: TrainerConfig) -> torch.optim.Optimizer:
    """``trainer.optimizer`` (adamw, adam, sgd) over the trainable parameters of ``model``.

    Adam and AdamW use torch's fused kernel (one pass over all parameters instead of a loop of small
    ops: about half the optimizer time on CPU) when every parameter is a float tensor on CPU or CUDA.
    """
    groups = [p for p in model.parameters() if p.requires_grad]
    if tcfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    cls = torch.optim.AdamW if tcfg.optimizer == "adamw" else torch.optim.Adam
    fused = bool(groups) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in groups)
    return cls(groups, lr=tcfg.lr, betas=tcfg.betas, weight_decay=tcfg.weight_decay, fused=fused or None)


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
