"""Rendering a tool-using conversation with the chat template, one turn at a time.

The prompt is ``tokenizer.apply_chat_template(messages, tools=schemas, add_generation_prompt=True)``.
After each reply the episode's tokens grow by the model's own tokens, then by the text the template puts
between that reply and the next one (the end of the reply's turn, the tool messages, the next generation
prompt), which :meth:`ChatRenderer.between_turns` cuts out of two renderings. So the tokens are exactly
what the model produced and saw, the history is never re-tokenized, and the template decides the layout.

:data:`TEMPLATES` holds the template used for a tokenizer without one (``tools``, in the layout of
Qwen2.5's: the tools' schemas as JSON lines in ``<tools>``, results in ``<tool_response>``, every reply
ended by the EOS token). :func:`check_template` refuses, before the run, a template that ignores
``tools``, drops tool messages or rewrites earlier turns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "MESSAGES_TEMPLATE",
    "TEMPLATES",
    "ChatRenderer",
    "TemplateSetupError",
    "check_template",
    "resolve_template",
]

MESSAGES_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}{{ '<assistant>' + message.content + eos_token + '\\n' }}"
    "{%- elif message.role == 'tool' %}{{ '<tool_response>' + message.content + '</tool_response>\\n' }}"
    "{%- else %}{{ '<' + message.role + '>' + message.content + '</' + message.role + '>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<assistant>' }}{% endif %}"
)
"""The messages in Qwen2.5's layout: every reply ended by the EOS token, tool results in
``<tool_response>``; a template puts its rendering of the tools before it."""

TOOLS_TEMPLATE = (
    "{%- if tools %}{{ '<tools>\\n' }}"
    "{%- for tool in tools %}{{ (tool.function or tool) | tojson }}{{ '\\n' }}{% endfor %}"
    "{{ '</tools>\\n' }}{% endif %}" + MESSAGES_TEMPLATE
)
"""A compact tool-aware template in Qwen2.5's layout (for tokenizers without a template of their own)."""

TEMPLATES: dict[str, str] = {"tools": TOOLS_TEMPLATE}
"""Templates shipped by name (``workflow_args.chat_template: tools``)."""

_FIX = (
    "give a template that renders tools and tool messages: workflow_args.chat_template: tools (the "
    "plugin's), a .jinja file (e.g. the template of a tool-using model such as Qwen2.5-Instruct), or "
    "model.chat_template"
)


class TemplateSetupError(ValueError):
    """The chat template cannot render a tool-using conversation (found before the run)."""


def resolve_template(setting: str | None, tokenizer: Any) -> str | None:
    """The template to render with: None for the tokenizer's own, else the text of a shipped template or
    of a file. ``setting`` None and a tokenizer without a template: the shipped ``tools`` template."""
    if setting is None:
        return None if getattr(tokenizer, "chat_template", None) else TOOLS_TEMPLATE
    if setting in TEMPLATES:
        return TEMPLATES[setting]
    path = Path(setting)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateSetupError(
            f"chat_template {setting!r} is neither a shipped template ({', '.join(TEMPLATES)}) nor a "
            f"readable file ({exc.strerror or exc}); give one of those names or the path of a .jinja file"
        ) from None


class ChatRenderer:
    """Renders conversations with ``tools`` (JSON schemas) through ``template`` (None: the tokenizer's)."""

    def __init__(self, tokenizer: Any, template: str | None, tools: Sequence[Mapping[str, Any]]) -> None:
        """Nothing is rendered yet."""
        self.tokenizer, self.template, self.tools = tokenizer, template, [dict(t) for t in tools]

    def render(self, messages: Sequence[Mapping[str, Any]], *, generation_prompt: bool) -> str:
        """The conversation as text (with the next assistant turn's header when ``generation_prompt``)."""
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=self.tools or None,
            chat_template=self.template,
            tokenize=False,
            add_generation_prompt=generation_prompt,
        )
        return str(text)

    def prompt(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The first prompt: the conversation and the generation prompt."""
        return self.render(messages, generation_prompt=True)

    def between_turns(
        self, history: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]], *, ended: bool
    ) -> str:
        """The text after the model's last reply (the last message of ``history``) up to the next reply:
        the rest of the reply's turn (without the EOS the model already produced when ``ended``), the
        tool messages ``results``, the generation prompt.

        Raises:
            TemplateSetupError: the template renders the earlier turns differently once results follow,
                or rewrites the reply, so no text can be appended to the tokens.
        """
        reply = str(history[-1]["content"])
        before = self.render(history, generation_prompt=False)
        after = self.render([*history, *results], generation_prompt=True)
        if not after.startswith(before):
            raise TemplateSetupError(
                "the chat template renders the conversation before the tool results differently once they "
                "follow, so the episode's tokens cannot simply grow; " + _FIX
            )
        at = before.rfind(reply) if reply else len(before)
        if at < 0:
            raise TemplateSetupError(
                "the chat template rewrites the model's reply (it is not in the rendered conversation), so "
                "the tokens the model produced cannot be kept; " + _FIX
            )
        tail = before[at + len(reply) :]
        eos = self.tokenizer.eos_token
        if ended and eos and tail.startswith(eos):
            tail = tail[len(eos) :]
        return tail + after[len(before) :]


_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_tool",
        "description": "A probe.",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer", "description": "x"}}},
    },
}


def check_template(renderer: ChatRenderer) -> None:
    """Refuse a template that ignores ``tools``, drops tool messages, rewrites earlier turns, or renders
    text the tokenizer cannot encode (one :class:`TemplateSetupError` naming the fix)."""
    tools = renderer.tools or [_PROBE_TOOL]
    probe = ChatRenderer(renderer.tokenizer, renderer.template, tools)
    bare = ChatRenderer(renderer.tokenizer, renderer.template, [])
    name = str(tools[0].get("function", tools[0]).get("name", ""))
    user, reply, result = {"role": "user", "content": "4417"}, "5519", "7723"
    history = [user, {"role": "assistant", "content": reply}]
    try:
        with_tools, without = probe.prompt([user]), bare.prompt([user])
        between = probe.between_turns(
            history, [{"role": "tool", "name": name, "content": result}], ended=True
        )
    except TemplateSetupError:
        raise
    except Exception as exc:
        raise TemplateSetupError(
            f"the chat template fails on a conversation with tools ({type(exc).__name__}: {exc}); {_FIX}"
        ) from None
    if with_tools == without or name not in with_tools:
        raise TemplateSetupError(
            "the chat template ignores `tools` (the prompt is the same with and without them), so the model "
            f"would never see its tools; {_FIX}"
        )
    if result not in between:
        raise TemplateSetupError(
            "the chat template leaves out messages with role 'tool', so the model would never see the "
            f"results; {_FIX}"
        )
    try:
        renderer.tokenizer(with_tools + between, add_special_tokens=False)
    except Exception as exc:
        raise TemplateSetupError(
            f"the tokenizer cannot encode the rendered conversation ({type(exc).__name__}: {exc}); use a "
            "tokenizer whose vocabulary covers the template's text (a character tokenizer needs every "
            "character of the template and the tools' schemas in its alphabet)"
        ) from None
