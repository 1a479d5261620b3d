"""``reward_model``: rewards from a sequence-classification model (a trained reward model) on disk.

Configured as ``tasks.reward_fns: [reward_model]`` with ``tasks.reward_fn_args: {reward_model: {path:
...}}``. The model is loaded once with ``AutoModelForSequenceClassification.from_pretrained`` and scores
each response as the logit ``label`` of the conversation: the prompt's messages (``prompt_messages``)
with the completion as the assistant's message, rendered with the reward model's own chat template when
it has one, else the prompt text followed by the completion.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from trinity_core.components.base import Component, ComponentArgs
from trinity_core.train.data.rewards import Completion, completion_text
from trinity_core.train.models.policy import ModelLoadError

__all__ = ["RewardModel"]


class _Args(ComponentArgs):
    path: str = Field(
        "", description="Local folder (or cached hub id) of an AutoModelForSequenceClassification."
    )
    label: int = Field(0, ge=0, description="Index of the logit used as the reward (0 for a one-logit head).")
    batch_size: int = Field(16, ge=1, description="Responses scored per forward pass.")
    max_length: int | None = Field(None, ge=1, description="Truncate inputs to this many tokens; None: no.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available.")


class RewardModel(Component):
    """The ``label`` logit of a sequence-classification model for each (prompt, completion) pair.

    Raises:
        ModelLoadError: at construction, when ``path`` is unset or does not hold a sequence-classification
            model with its tokenizer, or ``label`` exceeds its number of labels.
    """

    kind: ClassVar[str] = "reward_fn"
    Args: ClassVar[type[ComponentArgs]] = _Args
    path: str
    label: int
    batch_size: int
    max_length: int | None
    device: str

    def __init__(self, **args: Any) -> None:
        """Validate the arguments and load the model and its tokenizer (once)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        super().__init__(**args)
        where = "tasks.reward_fn_args.reward_model.path"
        if not self.path:
            raise ModelLoadError(f"{where}: unset; give the folder of a sequence-classification reward model")
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                self.tokenizer = AutoTokenizer.from_pretrained(self.path)
                self.model = AutoModelForSequenceClassification.from_pretrained(self.path)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(
                f"{where}: cannot load {self.path!r} as a sequence-classification model with its tokenizer "
                f"({exc}); give a folder written by save_pretrained"
            ) from None
        labels = self.model.config.num_labels
        if self.label >= labels:
            raise ModelLoadError(
                f"tasks.reward_fn_args.reward_model.label: {self.label}, but {self.path!r} has {labels} "
                f"label(s); use 0..{labels - 1}"
            )
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:  # the head reads the last token before padding
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        use_cuda = self.device == "cuda" or (self.device == "auto" and torch.cuda.is_available())
        self.model.to("cuda" if use_cuda else "cpu").eval().requires_grad_(False)

    def texts(
        self, prompts: Sequence[str], completions: Sequence[str], prompt_messages: Sequence[Any] | None
    ) -> list[str]:
        """The text scored for each response (see the module docstring)."""
        if prompt_messages is None or not getattr(self.tokenizer, "chat_template", None):
            return [p + c for p, c in zip(prompts, completions, strict=True)]
        conversations = [
            [*messages, {"role": "assistant", "content": completion}]
            for messages, completion in zip(prompt_messages, completions, strict=True)
        ]
        return list(self.tokenizer.apply_chat_template(conversations, tokenize=False))

    @torch.no_grad()
    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Completion],
        prompt_messages: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """The reward model's score of each completion (TRL's reward-function convention; prompts and
        completions as strings or in TRL's conversational form)."""
        if prompts and not isinstance(prompts[0], str):  # conversational: the prompts are the messages
            prompt_messages = prompts
            prompts = ["\n".join(m["content"] for m in messages) for messages in prompts]
        texts = self.texts(prompts, [completion_text(c) for c in completions], prompt_messages)
        device = next(self.model.parameters()).device
        scores: list[torch.Tensor] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size],
                padding=True,
                truncation=self.max_length is not None,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(device)
            scores.append(self.model(**batch).logits[:, self.label].double().cpu())
        return torch.cat(scores).tolist() if scores else []
