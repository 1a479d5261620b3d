"""Many responses to the same prompt with one forward pass of that prompt: log-probs and generation.

A GRPO-style step samples ``G`` responses per prompt, and the rows of a micro-batch come prompt by
prompt, so a plain forward pass runs every prompt ``G`` times. Under causal attention a prompt's hidden
states do not depend on what follows it, so the prompt can run once, its key-value cache be repeated for
its ``G`` rows, and only the response tokens run on top of it. The log-probs and their gradients are the
plain pass's up to float rounding (autograd carries each response's gradient back into the one prompt
pass, summed over the group), and the forward and backward do ``u * P + b * R`` tokens of work instead of
``b * (P + R)`` for ``u`` distinct prompts and ``b`` rows.

It applies to a transformers causal LM (also inside PEFT, under DDP or ``torch.compile``) that returns a
key-value cache; under FSDP, DeepSpeed, gradient checkpointing in training mode (transformers switches the
cache off there), or without a repeated prompt, :func:`shared_prompt_logits` returns None and the caller
takes the plain pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trinity_core.lm.forward_call import forward_parameters, model_under_wrappers

__all__ = ["prefill_shared_prompts", "prompt_groups", "shared_prompt_logits"]


def _prompt_call(model: Any) -> tuple[str, dict[str, Any]] | None:
    """How ``model`` takes a key-value cache, ``(keyword, extra arguments of a prompt-only call)``, or None
    when it cannot share a prompt's cache.

    The keyword is ``cache`` in recent transformers and ``past_key_values`` before; a prompt-only call
    needs the logits of its last position only (``logits_to_keep=1`` where the model takes it). Only
    wrappers that run the module as it is are looked through (DDP, ``torch.compile``, PEFT, the LoRA
    reference stand-in); a sharded engine (FSDP, DeepSpeed) gathers its parameters per forward call and
    is left to the plain pass.
    """
    from torch.distributed.fsdp import FSDPModule
    from transformers import PreTrainedModel

    inner = model_under_wrappers(model)
    if not isinstance(inner, PreTrainedModel) or isinstance(inner, FSDPModule):
        return None
    checkpointing = getattr(inner, "is_activation_checkpointing", None)  # transformers >= 5.x's name
    if checkpointing is None:
        checkpointing = getattr(inner, "is_gradient_checkpointing", False)
    if checkpointing and inner.training:  # transformers switches the cache off there
        return None
    params = forward_parameters(inner)
    kwarg = next((k for k in ("cache", "past_key_values") if k in params), None)
    if kwarg is None:
        return None
    return kwarg, {"use_cache": True, **({"logits_to_keep": 1} if "logits_to_keep" in params else {})}


def prompt_groups(input_ids: Tensor, attention_mask: Tensor | None, prompt_width: int) -> Tensor:
    """Row counts ``(u,)`` of the runs of consecutive rows with the same prompt (ids and mask alike)."""
    prompt = input_ids[:, :prompt_width]
    if attention_mask is not None:
        prompt = torch.cat([prompt, attention_mask[:, :prompt_width].to(prompt.dtype)], dim=-1)
    counts: Tensor = torch.unique_consecutive(prompt, dim=0, return_counts=True)[1]
    return counts


def shared_prompt_logits(
    model: Any, input_ids: Tensor, attention_mask: Tensor | None, prompt_width: int
) -> Tensor | None:
    """Logits ``(b, R, V)`` that predict the response tokens ``input_ids[:, P:]``, each distinct prompt run
    once; None when ``model`` cannot share a prompt or fewer than half the rows repeat one.

    ``attention_mask`` (or None when no prompt is padded) and the position ids are those of the plain
    pass: positions follow the mask, as in ``generate`` with left-padded prompts.
    """
    call = _prompt_call(model)
    if call is None or input_ids.shape[0] < 2:
        return None
    kwarg, prompt_kwargs = call
    counts = prompt_groups(input_ids, attention_mask, prompt_width)
    if 2 * counts.numel() > input_ids.shape[0]:  # too few repeats to pay for a second forward call
        return None
    P, R = prompt_width, input_ids.shape[1] - prompt_width
    starts = torch.cumsum(counts, 0) - counts
    positions = None
    if attention_mask is not None:
        mask = attention_mask.long()
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        prompt_kwargs |= {"attention_mask": mask[starts, :P], "position_ids": positions[starts, :P]}
    out = model(input_ids=input_ids[starts, :P], **prompt_kwargs)
    cache = getattr(out, kwarg, None)
    if cache is None:
        return None
    first: Tensor = out.logits[:, -1:].repeat_interleave(counts, dim=0, output_size=input_ids.shape[0])
    if R == 1:
        return first
    cache.batch_repeat_interleave(counts)
    rest_kwargs: dict[str, Any] = {kwarg: cache, "use_cache": False}
    if attention_mask is not None:
        assert positions is not None
        rest_kwargs |= {"attention_mask": mask[:, :-1], "position_ids": positions[:, P:-1]}
    else:
        rows = input_ids.shape[0]
        rest_kwargs["position_ids"] = torch.arange(P, P + R - 1, device=input_ids.device).expand(rows, -1)
    rest = model(input_ids=input_ids[:, P:-1], **rest_kwargs).logits
    return torch.cat([first, rest], dim=1)


def prefill_shared_prompts(model: Any, ids: Tensor, mask: Tensor, repeat: int) -> dict[str, Any]:
    """The key-value cache of the left-padded prompts ``ids`` / ``mask`` but their last token, repeated
    ``repeat`` times per prompt, as the keyword argument ``generate`` takes it (``{}`` when ``repeat`` is
    1, the prompts are one token long, ``model`` cannot share a prompt, or its generation config names a
    cache implementation of its own, which ``generate`` would build instead).

    ``generate`` given the repeated prompts and this cache runs only their last token before sampling, so
    each prompt's prefill is done once instead of ``repeat`` times.
    """
    call = _prompt_call(model)
    if call is None or repeat < 2 or ids.shape[1] < 2:
        return {}
    if getattr(getattr(model, "generation_config", None), "cache_implementation", None):
        return {}
    kwarg, prompt_kwargs = call
    attn = mask.long()
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    out = model(
        input_ids=ids[:, :-1], attention_mask=attn[:, :-1], position_ids=positions[:, :-1], **prompt_kwargs
    )
    cache = getattr(out, kwarg, None)
    if cache is None:
        return {}
    cache.batch_repeat_interleave(repeat)
    return {kwarg: cache}
