"""A scripted model for workflow tests: replies are fixed texts chosen by a function of the prompt.

:class:`ScriptedEngine` stands in for the generation engine, so everything above it runs as in training:
the :class:`~trinity_core.workflows.ModelWrapper` a workflow calls, the request queue that batches the
episodes' calls, the :class:`~trinity_core.workflows.WorkflowRunner`. Each prompt row is decoded
(special tokens spelled out) and ``script(prompt_text)`` gives the reply; it is encoded with the
tokenizer and ended with EOS, exactly as a sampled reply is (cut at ``max_new_tokens`` without EOS, and
marked truncated, when it is longer)::

    engine = ScriptedEngine(tokenizer, lambda prompt: "4" if prompt.endswith("2+2=") else "no")
    runner = WorkflowRunner("mine", MyWorkflow, {}, engine)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from trinity_core.experience import Experience
from trinity_core.workflows import GenerationEngine, ModelWrapper

__all__ = ["ScriptedEngine", "scripted_model"]

_DEFAULTS = {"max_new_tokens": 64, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": False}


class ScriptedEngine(GenerationEngine):
    """A generation engine whose replies are ``script(prompt_text)``.

    Args:
        tokenizer: encodes the replies and decodes the prompts.
        script: the reply to a prompt (its text, special tokens spelled out).
        defaults: sampling settings (only ``max_new_tokens`` matters); default 64 new tokens.

    Attributes:
        prompts: every prompt text the script was asked about, in order.

    Import it from ``trinity_core.testing.scripted`` (it needs the ``train`` extra, which
    ``trinity_core.testing`` itself does not).
    """

    def __init__(
        self, tokenizer: Any, script: Callable[[str], str], defaults: Mapping[str, Any] | None = None
    ) -> None:
        """No call made yet."""
        super().__init__(None, tokenizer, {**_DEFAULTS, **dict(defaults or {})})
        self.script = script
        self.prompts: list[str] = []

    def _sample(self, rows: list[list[int]], setting: dict[str, Any]) -> list[Experience]:
        self.calls += 1
        budget = int(setting["max_new_tokens"])
        out = []
        for row in rows:
            prompt = self.tokenizer.decode(row, skip_special_tokens=False)
            self.prompts.append(prompt)
            reply = self.encode_text(self.script(prompt))
            truncated = len(reply) >= budget  # no room left for EOS, as a sampled reply
            response = reply[:budget] if truncated else [*reply, self.tokenizer.eos_token_id]
            text_ids = response if truncated else response[:-1]
            out.append(
                Experience(
                    tokens=torch.tensor([*row, *response], dtype=torch.int32),
                    prompt_length=len(row),
                    logprobs=torch.zeros(len(response)),
                    response_text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                    truncate_status="response_truncated" if truncated else None,
                )
            )
        return out


def scripted_model(tokenizer: Any, script: Callable[[str], str], **defaults: Any) -> ModelWrapper:
    """A model wrapper (no queue: every call is answered at once) replying with ``script``."""
    return ModelWrapper(ScriptedEngine(tokenizer, script, defaults))
