"""Multi-turn episodes kept as tokens, and their two experience shapes.

A :class:`Conversation` holds one episode: the prompt, then model responses (``action_mask`` 1) and
environment or tool text (``action_mask`` 0), token by token, so the next turn's prompt is exactly the
tokens the model saw and produced (no re-tokenization of the history). It yields either

* :meth:`Conversation.to_experience`: **one experience per episode** with the whole conversation,
  ``experience_type == "multi_turn"``, the action mask on the model's tokens only and the sampling
  log-probs on them (0 elsewhere); or
* :meth:`Conversation.step_experiences`: **one experience per turn** (the prompt that turn saw and the
  response), ``eid.step`` = the turn, every turn rewarded with the episode's return, for step-wise
  algorithms (``step_wise_grpo``, ``multi_step_grpo``, ``gigpo``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trinity_core.components.workflow import ChatModel
from trinity_core.experience import Experience

__all__ = ["Conversation"]


class Conversation:
    """One episode's tokens; ``model`` samples the responses.

    Args:
        model: the workflow's model.
        prompt: the first prompt (encoded with ``<bos>``, as the explorer encodes prompts).
        history: every turn sees the whole conversation (True) or only the latest environment text
            (False: each turn's prompt is that text alone; :meth:`to_experience` then needs history).
    """

    def __init__(self, model: ChatModel, prompt: str, *, history: bool = True) -> None:
        """Start the episode at ``prompt``."""
        self.model, self.history = model, history
        self.ids: list[int] = self._encode(prompt, bos=True)
        self.prompt_length = len(self.ids)
        self.mask: list[bool] = []
        self.logprobs: list[float] = []
        self.turns: list[Experience] = []
        self._prompt = list(self.ids)

    def _encode(self, text: str, *, bos: bool) -> list[int]:
        encode = getattr(self.model, "encode", None)
        if encode is None:
            raise TypeError(
                "Conversation needs a model with encode(text, bos=...) (trinity_core ModelWrapper)"
            )
        return list(encode(text, bos=bos))

    def add_text(self, text: str) -> None:
        """Append environment or tool text (masked out of the loss)."""
        if self.history:
            new = self._encode(text, bos=False)
            self.ids += new
            self.mask += [False] * len(new)
            self.logprobs += [0.0] * len(new)
            self._prompt = list(self.ids)
        else:
            self._prompt = self._encode(text, bos=True)

    def respond(self, **sampling: Any) -> Experience:
        """Sample the model's next turn and append it; returns that turn's single-turn experience."""
        return self._append(self.model.generate_tokens([self._prompt], 1, **sampling)[0])

    async def respond_async(self, **sampling: Any) -> Experience:
        """:meth:`respond` for ``run_async``."""
        return self._append((await self.model.generate_tokens_async([self._prompt], 1, **sampling))[0])

    def _append(self, turn: Experience) -> Experience:
        assert turn.tokens is not None
        response = turn.tokens[turn.prompt_length :].tolist()
        self.ids += response
        self.mask += [True] * len(response)
        lp = turn.logprobs.tolist() if turn.logprobs is not None else [0.0] * len(response)
        self.logprobs += lp
        self._prompt = list(self.ids)
        self.turns.append(turn)
        return turn

    @property
    def truncated(self) -> bool:
        """Whether some response of the episode ran out of tokens before EOS."""
        return any(t.truncate_status is not None for t in self.turns)

    def to_experience(self, reward: float, info: Mapping[str, Any] | None = None) -> Experience:
        """The whole episode as one ``multi_turn`` experience (action mask on the model's tokens)."""
        if not self.history:
            raise ValueError(
                "a Conversation with history=False has no whole-episode experience; use step_experiences"
            )
        if not self.turns:
            raise ValueError("the episode has no model turn, so it has no experience")
        return Experience(
            tokens=torch.tensor(self.ids, dtype=torch.int32),
            prompt_length=self.prompt_length,
            action_mask=torch.tensor(self.mask, dtype=torch.bool),
            logprobs=torch.tensor(self.logprobs, dtype=torch.float32),
            reward=reward,
            truncate_status="response_truncated" if self.truncated else None,
            info=dict(info or {}),
        )

    def step_experiences(
        self, reward: float, infos: Sequence[Mapping[str, Any]] | None = None
    ) -> list[Experience]:
        """One experience per turn, ``eid.step`` = turn index, each rewarded with the episode's return;
        ``infos[t]`` is merged into turn ``t``'s ``info`` (e.g. GiGPO's ``env_state_hash``)."""
        out = []
        for t, turn in enumerate(self.turns):
            turn.eid.step = t
            turn.reward = reward
            if infos is not None:
                turn.info.update(infos[t])
            out.append(turn)
        return out
