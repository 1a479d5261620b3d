"""The log-prob pass: log-probs (and entropy) of the response tokens under a model.

Used by the learner's update and its no-grad passes (old, reference, teacher) and by the integrations.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trinity_core.lm.distribution import SamplingDistribution, tokens_into_turn
from trinity_core.lm.forward_call import forward_parameters, model_under_wrappers
from trinity_core.lm.shared_prompt import shared_prompt_logits

__all__ = ["response_logprobs"]


def response_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    prompt_width: int,
    with_entropy: bool,
    entropy_grad: bool = True,
    share_prompts: bool = False,
    distribution: SamplingDistribution | None = None,
    action_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``(B, R)`` of the response tokens ``input_ids[:, P:]`` (and per-token entropy).

    With ``distribution`` both are those of the distribution the sampler drew the tokens from
    (:class:`~trinity_core.lm.distribution.SamplingDistribution`: temperature, top-k, top-p, end of
    sequence banned for the first ``min_new_tokens`` of each turn, the turns read from ``action_mask``);
    without it, of ``softmax(logits)``.

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
    warped = distribution is not None and not distribution.is_plain
    if warped:
        assert distribution is not None
        into_turn = None if action_mask is None else tokens_into_turn(action_mask)
        logits = distribution.warp(logits, into_turn)
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, input_ids[:, prompt_width:, None].long()).squeeze(-1) - lse
    if warped and action_mask is not None:
        # A token that was not sampled (padding, an environment's tokens) may lie outside the sampler's
        # support (-inf); the loss never reads it, and a masked -inf would turn its sums into NaN.
        logp = torch.where(action_mask.to(torch.bool), logp, 0.0)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
            # Tokens the sampler never draws (-inf) have probability 0 and add nothing.
            finite = torch.where(torch.isfinite(logits), logits, 0.0)
            entropy = lse - (torch.softmax(logits, dim=-1) * finite).sum(-1)
    return logp, entropy


def _keeps_logits(model: Any) -> bool:
    """Whether the model under ``model``'s wrappers accepts ``logits_to_keep`` (a sharded engine holds it
    as ``module`` and passes keywords on)."""
    inner = model_under_wrappers(model)
    return "logits_to_keep" in forward_parameters(getattr(inner, "module", inner))
