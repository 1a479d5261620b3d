"""The distribution the sampler draws from, so that the learner computes log-probs of that distribution.

``generate`` does not sample from ``softmax(logits)``: with the run's settings it bans end-of-sequence for
the first ``min_new_tokens`` tokens of each response, divides by the temperature, and keeps only the
``top_k`` largest logits and the smallest set of tokens whose probability reaches ``top_p`` (Hugging
Face's ``MinNewTokensLengthLogitsProcessor``, ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and
``TopPLogitsWarper``, in that order). :meth:`SamplingDistribution.warp` applies the same steps to the
learner's logits, so the log-probs, entropy and KL the learner optimises are those of the distribution
the responses came from (a token the sampler can never draw gets ``-inf``, probability 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["SamplingDistribution", "tokens_into_turn"]


@dataclass(frozen=True)
class SamplingDistribution:
    """The sampler's settings that shape its distribution.

    Attributes:
        temperature: logits are divided by it (1: unchanged).
        top_k: keep the ``top_k`` largest logits, ties included (0: all).
        top_p: keep the smallest set of largest-probability tokens whose probability reaches ``top_p``
            (1: all).
        min_new_tokens: end-of-sequence is banned for the first ``min_new_tokens`` tokens of a response
            (of each assistant turn in a multi-turn response).
        eos_token_id: the end-of-sequence token (None: nothing banned).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_new_tokens: int = 0
    eos_token_id: int | None = None

    @property
    def is_plain(self) -> bool:
        """Whether sampling is from ``softmax(logits)`` itself (nothing to apply)."""
        banned = self.min_new_tokens > 0 and self.eos_token_id is not None
        return self.temperature == 1.0 and self.top_k == 0 and self.top_p >= 1.0 and not banned

    def warp(self, logits: Tensor, into_turn: Tensor | None = None) -> Tensor:
        """The sampler's logits for ``logits`` ``(..., R, V)`` of ``R`` response positions.

        ``into_turn`` ``(..., R)``: how many tokens of its turn precede each position (``0`` at a turn's
        first token; :func:`tokens_into_turn`); None: one turn starting at position 0.
        """
        if self.min_new_tokens > 0 and self.eos_token_id is not None:
            if into_turn is None:
                into_turn = torch.arange(logits.shape[-2], device=logits.device)
            banned = (into_turn < self.min_new_tokens)[..., None] & (
                torch.arange(logits.shape[-1], device=logits.device) == self.eos_token_id
            )
            logits = logits.masked_fill(banned, -torch.inf)
        if self.temperature != 1.0:
            logits = logits / self.temperature
        if self.top_k > 0:
            k = min(self.top_k, logits.shape[-1])
            kth = torch.topk(logits, k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, -torch.inf)
        if self.top_p < 1.0:
            logits = _top_p(logits, self.top_p)
        return logits


def _top_p(logits: Tensor, top_p: float) -> Tensor:
    """Nucleus filtering as ``TopPLogitsWarper`` does it: in ascending order, drop the tokens whose
    cumulative probability stays at or below ``1 - top_p``; the largest is always kept."""
    ascending, order = torch.sort(logits, dim=-1)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= 1 - top_p
    drop_sorted[..., -1] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, -torch.inf)


def tokens_into_turn(action_mask: Tensor) -> Tensor:
    """``(..., R)`` int64: for each response position, the tokens of its assistant turn before it.

    A turn is a run of positions the action mask selects (a single-turn response is one turn from
    position 0). Positions outside every turn (an environment's tokens, padding) were not sampled: they
    get the largest int64, so that no ban applies there.
    """
    selected = action_mask.to(torch.bool)
    positions = torch.arange(selected.shape[-1], device=selected.device).expand_as(selected)
    # The last position before each one that is not an action token (-1 at the start).
    last_outside = torch.cummax(torch.where(selected, -1, positions), dim=-1).values
    return torch.where(selected, positions - last_outside - 1, torch.iinfo(torch.int64).max)
