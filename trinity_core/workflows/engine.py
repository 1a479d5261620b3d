"""The generation engine behind every model wrapper: one batched ``generate`` for many requests.

A request is a list of encoded prompts with ``n`` responses each and its sampling settings; the engine
samples all requests with equal settings in **one** call of
:func:`trinity_core.lm.sampling.sample_padded` (rows in request order, each prompt repeated ``n``
times, exactly as :func:`~trinity_core.lm.sampling.generate` lays out a step) and hands every request
its responses as single-turn :class:`Experience` objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trinity_core.experience import Experience
from trinity_core.lm.sampling import Rollout, encode_prompts, pad_rows, sample_padded

__all__ = ["SAMPLING_KEYS", "GenerationEngine", "Request"]

SAMPLING_KEYS = ("max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "greedy")
"""Sampling settings a call may override (``max_tokens``, Trinity-RFT's name, means ``max_new_tokens``)."""


@dataclass
class Request:
    """One model call of one episode: ``n`` responses to each of ``rows`` (encoded prompts)."""

    rows: list[list[int]]
    n: int
    sampling: tuple[tuple[str, Any], ...]
    key: int = 0
    """The episode's index: a batch is laid out in key order, so it never depends on thread timing."""


@dataclass
class GenerationEngine:
    """Samples from ``model`` with ``tokenizer``; ``defaults`` are the run's sampling settings.

    Attributes:
        calls: batched ``generate`` calls made so far (the benchmark's and the metrics' count).
    """

    model: Any
    tokenizer: Any
    defaults: dict[str, Any]
    calls: int = field(default=0)
    _text_ids: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def sampling(self, overrides: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
        """The settings of a call: ``overrides`` over :attr:`defaults` (unknown keys are an error)."""
        given = dict(overrides)
        if "max_tokens" in given:
            given["max_new_tokens"] = given.pop("max_tokens")
        unknown = sorted(set(given) - set(SAMPLING_KEYS))
        if unknown:
            raise TypeError(f"unknown sampling argument(s) {unknown}; known: {list(SAMPLING_KEYS)}")
        merged = {**self.defaults, **given}
        return tuple(sorted(merged.items()))

    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (memoized: environments repeat their texts)."""
        cache = self._text_ids
        if text not in cache:
            if len(cache) >= 65536:
                cache.clear()
            cache[text] = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(cache[text])

    def encode(self, prompts: Sequence[str]) -> list[list[int]]:
        """Token ids of text prompts, encoded as the explorer encodes them (``<bos>`` first)."""
        ids, mask = encode_prompts(self.tokenizer, prompts, torch.device("cpu"))
        return [row[m].tolist() for row, m in zip(ids, mask, strict=True)]

    def run(self, requests: Sequence[Request]) -> list[list[Experience]]:
        """Every request's responses; one ``generate`` per distinct sampling setting."""
        out: list[list[Experience]] = [[] for _ in requests]
        by_setting: dict[tuple[tuple[str, Any], ...], list[int]] = {}
        for i, request in enumerate(requests):
            by_setting.setdefault(request.sampling, []).append(i)
        for setting, members in by_setting.items():
            rows = [row for i in members for row in requests[i].rows for _ in range(requests[i].n)]
            exps = self._sample(rows, dict(setting))
            start = 0
            for i in members:
                count = len(requests[i].rows) * requests[i].n
                out[i] = exps[start : start + count]
                start += count
        return out

    def _sample(self, rows: list[list[int]], setting: dict[str, Any]) -> list[Experience]:
        device = next(self.model.parameters()).device
        ids, mask = pad_rows(self.tokenizer, rows, device)
        rollout = sample_padded(self.model, self.tokenizer, ids, mask, logprobs=True, **setting)
        self.calls += 1
        return self.experiences(rollout)

    def experiences(self, rollout: Rollout) -> list[Experience]:
        """One single-turn experience per rollout row: tokens, log-probs, response text, truncation."""
        lengths, truncated = rollout.response_lengths.cpu(), rollout.truncated.cpu()
        ends = (lengths - (~truncated).long()).tolist()
        response = rollout.response_ids.cpu()
        texts = self.tokenizer.batch_decode([r[:e].tolist() for r, e in zip(response, ends, strict=True)])
        logprobs = rollout.logprobs.cpu() if rollout.logprobs is not None else None
        out = []
        for i, (prompt, m) in enumerate(
            zip(rollout.prompt_ids.cpu(), rollout.prompt_mask.cpu(), strict=True)
        ):
            n = int(lengths[i])
            out.append(
                Experience(
                    tokens=torch.cat([prompt[m], response[i, :n]]).to(torch.int32),
                    prompt_length=int(m.sum()),
                    logprobs=None if logprobs is None else logprobs[i, :n],
                    response_text=texts[i],
                    truncate_status="response_truncated" if bool(truncated[i]) else None,
                )
            )
        return out
