"""Rollout: sample ``G`` responses per prompt with Hugging Face ``generate``.

Prompts are encoded as ``<bos>`` + text (when the tokenizer has a BOS), left-padded; responses end at the
first EOS (kept, so the policy learns to stop) or after ``max_new_tokens`` (truncated).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trinity_core.lm.shared_prompt import prefill_shared_prompts

__all__ = ["Rollout", "decode_completions", "encode_prompts", "generate", "pad_rows", "sample_padded"]


@dataclass
class Rollout:
    """The sampled responses of one step, ``N = len(prompts) * G`` rows, prompt-major.

    Attributes:
        prompt_ids: ``(N, P)`` left-padded prompt ids.
        prompt_mask: ``(N, P)`` bool, True on real prompt tokens.
        response_ids: ``(N, T)`` generated ids, pad after the first EOS.
        response_lengths: ``(N,)`` int64, tokens up to and including the first EOS (``T`` if none).
        truncated: ``(N,)`` bool, no EOS within ``T`` tokens.
        logprobs: ``(N, T)`` float32, the sampling policy's log-probability of each response token
            (log-softmax of its raw logits; 0 after the response), the behaviour log-probs.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_lengths: Tensor
    truncated: Tensor
    logprobs: Tensor | None = None
    """``(N, T)`` float32 log-probs of the sampled tokens under the policy (0 after the response), when
    asked for: the behaviour log-probs of off-policy corrections."""

    @property
    def response_mask(self) -> Tensor:
        """``(N, T)`` bool, True on the real response tokens."""
        col = torch.arange(self.response_ids.shape[1], device=self.response_ids.device)
        return col < self.response_lengths[:, None]


def decode_completions(tokenizer: Any, rollout: Rollout) -> tuple[list[str], list[tuple[int, ...]]]:
    """Completion texts and ids = response tokens before EOS, special tokens spelled out (a stray
    ``<pad>`` never matches an answer); the ids go to reward functions as ``completion_ids``."""
    ends = (rollout.response_lengths - (~rollout.truncated).long()).tolist()
    ids = rollout.response_ids.tolist()
    rows = [tuple(row[:e]) for row, e in zip(ids, ends, strict=True)]
    # The G responses to a prompt often repeat: each distinct response is decoded once.
    distinct = list(dict.fromkeys(rows))
    text = dict(zip(distinct, tokenizer.batch_decode([list(r) for r in distinct]), strict=True))
    return [text[row] for row in rows], rows


def encode_prompts(tokenizer: Any, prompts: Sequence[str], device: torch.device) -> tuple[Tensor, Tensor]:
    """``(ids, mask)`` of ``prompts``, ``<bos>``-prefixed when the tokenizer has one, left-padded."""
    rows = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    bos = tokenizer.bos_token_id
    if bos is not None:
        # As an id in front of the prompt's own tokens (the text "<bos>" could tokenize differently).
        rows = [[bos, *r] if not r or r[0] != bos else r for r in rows]
    padded = tokenizer.pad({"input_ids": rows}, padding=True, padding_side="left", return_tensors="pt")
    return padded["input_ids"].to(device), padded["attention_mask"].to(device, torch.bool)


@torch.no_grad()
def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    repeat: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    greedy: bool = False,
    logprobs: bool = False,
    min_new_tokens: int = 1,
) -> Rollout:
    """Sample ``repeat`` responses for each prompt (rows ``i*repeat .. i*repeat+repeat-1`` for prompt ``i``).

    Uses the global torch RNG (seeded by the trainer and saved in checkpoints). With ``logprobs`` the
    rollout carries the log-probability of each response token under the distribution it was drawn from
    (temperature, top-k, top-p and ``min_new_tokens`` applied: :mod:`trinity_core.lm.distribution`).
    """
    device = next(model.parameters()).device
    ids, mask = encode_prompts(tokenizer, prompts, device)
    return sample_padded(
        model,
        tokenizer,
        ids,
        mask,
        repeat=repeat,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        greedy=greedy,
        logprobs=logprobs,
        min_new_tokens=min_new_tokens,
    )


def pad_rows(tokenizer: Any, rows: Sequence[Sequence[int]], device: torch.device) -> tuple[Tensor, Tensor]:
    """``(ids, mask)`` of already encoded prompts (token id lists), left-padded as :func:`encode_prompts`."""
    padded = tokenizer.pad(
        {"input_ids": [list(r) for r in rows]}, padding=True, padding_side="left", return_tensors="pt"
    )
    return padded["input_ids"].to(device), padded["attention_mask"].to(device, torch.bool)


@torch.no_grad()
def sample_padded(
    model: Any,
    tokenizer: Any,
    ids: Tensor,
    mask: Tensor,
    *,
    repeat: int = 1,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    greedy: bool = False,
    logprobs: bool = False,
    min_new_tokens: int = 1,
) -> Rollout:
    """``repeat`` responses per row of the left-padded prompts ``ids`` / ``mask`` (the body of
    :func:`generate`); rows ``i*repeat .. i*repeat+repeat-1`` answer prompt ``i``.

    A repeated prompt is run through the model once (all its tokens but the last) and its key-value
    cache repeated for its rows (:func:`~trinity_core.lm.shared_prompt.prefill_shared_prompts`);
    ``generate`` then starts from that cache: the same samples, less work.

    The distribution is the run's settings alone: every other sampling setting of the model's
    ``generation_config`` (a checkpoint's ``generation_config.json`` often sets temperature, top-k,
    top-p, a repetition penalty) is switched off for the call, and ``top_k=0`` means no top-k (not
    transformers' default of 50). With ``logprobs`` each token's log-probability is read from the
    processed scores ``generate`` sampled from.
    """
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    sampling = _sampling_settings(model, temperature, top_p, top_k, greedy)
    if logprobs:
        sampling["output_scores"] = True
    was_training = model.training
    model.eval()
    cache = prefill_shared_prompts(model, ids, mask, repeat)
    ids, mask = ids.repeat_interleave(repeat, dim=0), mask.repeat_interleave(repeat, dim=0)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask.long(),
        **cache,
        max_new_tokens=max_new_tokens,
        min_new_tokens=min_new_tokens,
        eos_token_id=eos,
        pad_token_id=pad,
        use_cache=True,
        return_dict_in_generate=True,
        **sampling,
    )
    model.train(was_training)
    response = out.sequences[:, ids.shape[1] :]
    picked = None
    if logprobs:  # under the distribution sampled from: the scores after every processor and warper
        steps, out.scores = out.scores, None
        picked = _picked_logprobs(steps, response)
    return _cut_at_eos(ids, mask, response, picked, eos=eos, pad=pad, width=max_new_tokens)


def _picked_logprobs(scores: Sequence[Tensor], response: Tensor) -> Tensor:
    """``(N, steps)``: each sampled token's log-probability under its step's processed ``(N, V)`` scores.

    Step by step: stacking every step's scores first would hold a copy of them all at once.
    """
    return torch.stack(
        [
            step.float().log_softmax(-1).gather(-1, response[:, t, None].long())[:, 0]
            for t, step in enumerate(scores)
        ],
        dim=1,
    )


_NEUTRAL = {
    "typical_p": 1.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}
"""Settings a model's ``generation_config`` may carry that would change the distribution, switched off."""


def _sampling_settings(
    model: Any, temperature: float, top_p: float, top_k: int, greedy: bool
) -> dict[str, Any]:
    """The keyword arguments of ``generate`` that make its distribution exactly the run's settings."""
    if greedy:
        return {"do_sample": False, **_NEUTRAL}
    settings: dict[str, Any] = {
        "do_sample": True,
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        **_NEUTRAL,
    }
    config = getattr(model, "generation_config", None)
    # Settings whose "off" is None cannot be passed as None (None means "unset": the model's value is
    # used); a value that keeps every token switches them off.
    if getattr(config, "min_p", None) is not None:
        settings["min_p"] = 0.0
    if getattr(config, "top_h", None) is not None:
        settings["top_h"] = 1.0
    return settings


def _cut_at_eos(
    ids: Tensor, mask: Tensor, response: Tensor, picked: Tensor | None, *, eos: int, pad: int, width: int
) -> Rollout:
    """The rollout of ``generate``'s responses: ``width`` columns, each row cut after its first EOS
    (pad after it, log-prob 0 there); a row without an EOS is truncated."""
    if response.shape[1] < width:  # every row stopped early: pad to a fixed width
        extra = response.new_full((response.shape[0], width - response.shape[1]), pad)
        response = torch.cat([response, extra], dim=1)
        if picked is not None:
            picked = torch.nn.functional.pad(picked, (0, width - picked.shape[1]))
    is_eos = response == eos
    has_eos = is_eos.any(dim=1)
    first = torch.where(has_eos, is_eos.int().argmax(dim=1), response.shape[1] - 1)
    lengths = first + 1
    col = torch.arange(response.shape[1], device=response.device)
    response = torch.where(col < lengths[:, None], response, pad)
    if picked is not None:
        picked = torch.where(col < lengths[:, None], picked, 0.0)
    return Rollout(ids, mask, response, lengths.long(), ~has_eos, picked)
