"""The model wrapper a workflow calls: ``generate`` / ``chat`` / ``generate_tokens``, sync and async.

Shaped like Trinity-RFT's ``ModelWrapper``: each call returns one single-turn :class:`Experience` per
response (``n`` per prompt, prompt-major) with tokens, ``prompt_length``, ``logprobs``, ``response_text``
and ``truncate_status``. A wrapper bound to the explorer's :class:`GenerateQueue` waits for the other
episodes' calls and is sampled in one batch with them; an unbound wrapper samples at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from trinity_core.experience import Experience
from trinity_core.workflows.engine import GenerationEngine, Request
from trinity_core.workflows.queue import GenerateQueue

__all__ = ["ModelWrapper", "TurnLimitError", "render_messages"]


class TurnLimitError(RuntimeError):
    """An episode made more model calls than ``rollout.workflow_max_calls`` (an episode that never ends)."""


def render_messages(tokenizer: Any, messages: Sequence[Mapping[str, Any]]) -> str:
    """The text prompt of a conversation: the tokenizer's chat template with a generation prompt, or
    (a tokenizer without one) the message contents concatenated."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return str(text)
    return "".join(str(m.get("content", "")) for m in messages)


class ModelWrapper:
    """A workflow's ``model``.

    Args:
        engine: samples the requests.
        queue: the explorer's queue (None: every call is its own ``generate``).
        key: this episode's index in the queue.
        max_calls: calls allowed to this episode (None: no limit); one more raises :class:`TurnLimitError`.
    """

    def __init__(
        self,
        engine: GenerationEngine,
        *,
        queue: GenerateQueue | None = None,
        key: int = 0,
        max_calls: int | None = None,
    ) -> None:
        """Bind the wrapper; it has made no call yet."""
        self.engine, self.queue, self.key, self.max_calls = engine, queue, key, max_calls
        self.turns = 0
        """Model calls made so far (the turn an error is reported at)."""

    @property
    def tokenizer(self) -> Any:
        """The policy's tokenizer."""
        return self.engine.tokenizer

    def encode(self, text: str, *, bos: bool = False) -> list[int]:
        """Token ids of ``text`` (``bos``: with ``<bos>`` in front, as prompts are encoded)."""
        ids = self.engine.encode_text(text)
        bos_id = self.tokenizer.bos_token_id
        # As encode_prompts puts it: an id in front, unless the text already starts with it.
        if bos and bos_id is not None and (not ids or ids[0] != bos_id):
            return [bos_id, *ids]
        return ids

    # ------------------------------------------------------------------ sync

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], n: int = 1, **sampling: Any
    ) -> list[Experience]:
        """``n`` responses to each encoded prompt."""
        request = self._request(prompts, n, sampling)
        if self.queue is None:
            return self.engine.run([request])[0]
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.queue.submit(request).result()
        raise RuntimeError(
            "a workflow with is_async = True called a blocking model method; await the *_async one "
            "(generate_async, chat_async, generate_tokens_async)"
        )

    def generate(self, prompts: Sequence[str], n: int = 1, **sampling: Any) -> list[Experience]:
        """``n`` responses to each text prompt."""
        return self.generate_tokens(self.engine.encode(prompts), n, **sampling)

    def chat(self, messages: Sequence[Mapping[str, Any]], n: int = 1, **sampling: Any) -> list[Experience]:
        """``n`` responses to one conversation (see :func:`render_messages`)."""
        return self.generate([render_messages(self.tokenizer, messages)], n, **sampling)

    # ------------------------------------------------------------------ async

    async def generate_tokens_async(
        self, prompts: Sequence[Sequence[int]], n: int = 1, **sampling: Any
    ) -> list[Experience]:
        """:meth:`generate_tokens`, awaiting the batch instead of blocking."""
        request = self._request(prompts, n, sampling)
        if self.queue is None:
            return self.engine.run([request])[0]
        return await asyncio.wrap_future(self.queue.submit(request))

    async def generate_async(self, prompts: Sequence[str], n: int = 1, **sampling: Any) -> list[Experience]:
        """:meth:`generate`, awaiting the batch."""
        return await self.generate_tokens_async(self.engine.encode(prompts), n, **sampling)

    async def chat_async(
        self, messages: Sequence[Mapping[str, Any]], n: int = 1, **sampling: Any
    ) -> list[Experience]:
        """:meth:`chat`, awaiting the batch."""
        return await self.generate_async([render_messages(self.tokenizer, messages)], n, **sampling)

    # ------------------------------------------------------------------ helpers

    def _request(self, prompts: Sequence[Sequence[int]], n: int, sampling: dict[str, Any]) -> Request:
        if self.max_calls is not None and self.turns >= self.max_calls:
            raise TurnLimitError(
                f"the episode made {self.turns} model calls, the limit (rollout.workflow_max_calls); end the "
                "episode sooner (a max_turns argument) or raise the limit"
            )
        if n < 1 or not prompts:
            raise ValueError(f"a model call needs at least one prompt and n >= 1 (got {len(prompts)}, n={n})")
        self.turns += 1
        return Request([list(p) for p in prompts], n, self.engine.sampling(sampling), self.key)
