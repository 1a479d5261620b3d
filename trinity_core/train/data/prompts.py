"""Prompt rendering: the text the policy completes, through the tokenizer's chat template when it has one.

``model.chat_template`` decides: unset, the tokenizer's own template is used when it has one (prompts are
then ``apply_chat_template(conversation, add_generation_prompt=True)``), else the plain ``prompt`` text;
a path names a Jinja template file that replaces the tokenizer's; ``true`` requires a template; ``false``
turns templates off. The conversation of a row is its ``prompt_messages`` (the dataset task's: a system
prompt and the prompt as a user message, or a ``messages_key`` column as it is), else the prompt as one
user message. :meth:`PromptRenderer.messages` gives each response's conversation with the sampled answer
appended as the assistant's message (``Experience.messages``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["PromptRenderError", "PromptRenderer", "build_prompter", "use_chat_template"]

Message = dict[str, Any]


class PromptRenderError(ValueError):
    """A chat template is missing, unreadable, or fails to render a prompt."""


def _conversation(row: dict[str, Any]) -> list[Message]:
    messages = row.get("prompt_messages")
    return list(messages) if messages else [{"role": "user", "content": row["prompt"]}]


class PromptRenderer:
    """Turns task rows into the prompt texts the policy completes.

    Args:
        tokenizer: the policy's tokenizer (its ``chat_template`` is used when ``templated``).
        templated: render with the chat template; False: the rows' ``prompt`` text as it is.
    """

    def __init__(self, tokenizer: Any, templated: bool) -> None:
        """Hold the tokenizer; nothing is rendered here."""
        self.tokenizer, self.templated = tokenizer, templated

    def texts(self, rows: Sequence[dict[str, Any]]) -> list[str]:
        """The prompt text of each row (chat-templated when :attr:`templated`).

        Raises:
            PromptRenderError: the template fails on a row (the row's prompt is named).
        """
        if not self.templated:
            return [row["prompt"] for row in rows]
        conversations = [_conversation(row) for row in rows]
        try:
            return list(self._render(conversations))
        except Exception:  # find the row to name; a template error can be of any type (Jinja, KeyError)
            for row, conversation in zip(rows, conversations, strict=True):
                try:
                    self._render([conversation])
                except Exception as exc:
                    raise PromptRenderError(
                        f"model.chat_template: the chat template fails on the prompt {row['prompt']!r:.60} "
                        f"({type(exc).__name__}: {exc}); fix the template, or set model.chat_template: false "
                        "to train on the plain prompt text"
                    ) from exc
            raise

    def _render(self, conversations: list[list[Message]]) -> list[str]:
        rendered = self.tokenizer.apply_chat_template(
            conversations, tokenize=False, add_generation_prompt=True
        )
        if not all(isinstance(text, str) and text for text in rendered):
            raise ValueError("the template rendered an empty prompt")
        return list(rendered)

    def messages(
        self, rows: Sequence[dict[str, Any]], completions: Sequence[str], repeat: int
    ) -> list[list[Message]] | None:
        """Per response (``repeat`` per row, row-major), the conversation with the completion appended as
        the assistant's message; None when prompts are not chat-templated."""
        if not self.templated:
            return None
        conversations = [_conversation(row) for row in rows for _ in range(repeat)]
        return [
            [*conversation, {"role": "assistant", "content": completion}]
            for conversation, completion in zip(conversations, completions, strict=True)
        ]


def use_chat_template(tokenizer: Any, setting: bool | str | None) -> bool:
    """Apply ``model.chat_template`` to ``tokenizer`` (a file's template is set on it); whether prompts are
    chat-templated.

    Raises:
        PromptRenderError: the file cannot be read, or ``true`` with a tokenizer that has no template.
    """
    if setting is False:
        return False
    if isinstance(setting, str):
        path = Path(setting)
        try:
            tokenizer.chat_template = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PromptRenderError(
                f"model.chat_template: cannot read the template file {setting!r} ({exc.strerror}); give a "
                "Jinja chat template file, true/unset for the tokenizer's own template, or false"
            ) from None
        return True
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if setting is True and not has_template:
        raise PromptRenderError(
            "model.chat_template: true, but the tokenizer has no chat template; name a template file, "
            "or set it to false"
        )
    return has_template


def build_prompter(tokenizer: Any, setting: bool | str | None, task: Any) -> PromptRenderer:
    """The run's :class:`PromptRenderer`, checked on one held-out row of ``task`` so that a template that
    fails to render stops the run before its first step."""
    renderer = PromptRenderer(tokenizer, use_chat_template(tokenizer, setting))
    if renderer.templated:
        renderer.texts(task.eval_rows(1, 0))
    return renderer
