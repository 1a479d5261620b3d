"""``tools``: the model answers a task with function calls; the run's reward functions score the answer."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from trinity_core import registry
from trinity_core.components import ComponentArgs, ToolParser, Workflow
from trinity_core.experience import Experience
from trinity_core.workflows import Conversation, WorkflowError
from trinity_plugin_tools.metrics import episode_info, tool_metrics
from trinity_plugin_tools.templates import ChatRenderer, check_template, resolve_template
from trinity_plugin_tools.toolbox import Toolbox, ToolSetupError, load_tools

__all__ = ["ToolsWorkflow", "ToolsWorkflowArgs"]


class ToolsWorkflowArgs(ComponentArgs):
    """Arguments of :class:`ToolsWorkflow`."""

    tools: list[str] = Field(
        ["trinity_plugin_tools.python"],
        description="Dotted paths of the tools: plain functions (sync or async) with type hints and a "
        "Google-style docstring, as TRL takes them; [] for none.",
    )
    parser: str = Field(
        "hermes", description="Tool parser (kind 'tool_parser'): hermes, mistral, or a plugin's."
    )
    max_turns: int = Field(4, ge=1, description="Model replies per episode; the episode ends after the last.")
    max_tool_calls: int = Field(
        4,
        ge=0,
        description="Tool calls per episode; a reply asking for more ends the episode, its calls not run.",
    )
    tool_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a tool call may take before it is an error."
    )
    max_result_chars: int = Field(
        2000, ge=16, description="Characters of a tool's answer shown to the model; the rest is cut."
    )
    chat_template: str | None = Field(
        None,
        description="A shipped template ('tools') or a .jinja file; unset: the tokenizer's own, or 'tools' "
        "for a tokenizer without one.",
    )
    system_prompt: str | None = Field(None, description="A system message put before the task's prompt.")
    success_threshold: float = Field(
        1.0, description="An episode whose reward reaches this counts as a success in the tools/* metrics."
    )
    experience: Literal["episode", "step"] = Field(
        "episode",
        description="'episode': one multi_turn experience (tool results masked); 'step': one per reply.",
    )


@dataclass(frozen=True)
class _Setup:
    toolbox: Toolbox
    parser: ToolParser
    renderer: ChatRenderer


_SETUPS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], _Setup]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _load_parser(name: str) -> ToolParser:
    try:
        cls = registry.resolve("tool_parser", name)
    except registry.PluginError as exc:  # its lines joined: the CLI prints one line
        raise ToolSetupError(f"parser: {' '.join(str(exc).split())}") from None
    parser = cls()
    if not isinstance(parser, ToolParser):
        raise ToolSetupError(f"parser: {name!r} is a {type(parser).__name__}, not a ToolParser")
    return parser


def setup_for(args: ToolsWorkflowArgs, tokenizer: Any) -> _Setup:
    """The run's tools, parser and renderer, checked (built once per tokenizer and arguments)."""
    key = (tuple(args.tools), args.parser, args.chat_template)
    with _LOCK:
        cached = _SETUPS.setdefault(tokenizer, {}).get(key)
    if cached is not None:
        return cached
    parser = _load_parser(args.parser)
    toolbox: Toolbox | None = None
    for i in range(len(args.tools)):  # one at a time, so the message names the entry
        try:
            load_tools((args.tools[i],))
        except ToolSetupError as exc:
            raise ToolSetupError(f"tools[{i}]: {exc}") from None
    toolbox = load_tools(tuple(args.tools))
    renderer = ChatRenderer(tokenizer, resolve_template(args.chat_template, tokenizer), toolbox.schemas)
    check_template(renderer)
    setup = _Setup(toolbox, parser, renderer)
    with _LOCK:
        _SETUPS.setdefault(tokenizer, {})[key] = setup
    return setup


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}\n... [{len(text) - limit} more characters cut]"


class ToolsWorkflow(Workflow):
    """The model calls tools (TRL-style functions, the python sandbox) to answer a task; the run's reward
    functions score the final answer.

    An episode renders the task's prompt with the chat template and the tools' JSON schemas, then
    alternates: the model replies; the parser reads its calls; each call is answered by its tool (or by
    an error message: malformed call, unknown tool, bad arguments, timeout, the tool raised) as a
    ``{"role": "tool"}`` message, rendered by the template and appended as environment tokens (masked
    out of the loss). It ends on a reply without a call (the answer), after ``max_turns`` replies, or on
    a reply asking for more than ``max_tool_calls`` calls in all. The reward is the run's reward
    functions on the last reply's text outside its calls. Every experience's ``info`` holds the
    episode's tool counts, turns, how it ended and ``success``; the step reports ``tools/*`` metrics.
    """

    Args: ClassVar[type[ComponentArgs]] = ToolsWorkflowArgs
    is_async: ClassVar[bool] = True
    conformance_task: ClassVar[dict[str, Any] | None] = {"prompt": "What is 123*4567?", "answer": "561741"}
    tools: list[str]
    parser: str
    max_turns: int
    max_tool_calls: int
    tool_timeout_s: float
    max_result_chars: int
    chat_template: str | None
    system_prompt: str | None
    success_threshold: float
    experience: str

    @classmethod
    def check_run(cls, args: ComponentArgs, tokenizer: Any) -> None:
        """Load the tools and the parser and try the chat template before the run (ValueError if not)."""
        assert isinstance(args, ToolsWorkflowArgs)
        setup_for(args, tokenizer)

    @classmethod
    def step_metrics(cls, experiences: Sequence[Experience]) -> dict[str, float]:
        """``tools/*`` (see :mod:`trinity_plugin_tools.metrics`)."""
        return tool_metrics(experiences)

    def run(self) -> list[Experience]:
        """One episode (outside the explorer; the explorer awaits :meth:`run_async`)."""
        return asyncio.run(self.run_async())

    def _messages(self) -> list[dict[str, Any]]:
        raw = self.task.raw_task
        if raw.get("prompt_messages"):
            messages = [dict(m) for m in raw["prompt_messages"]]
        else:
            messages = [{"role": "user", "content": self.task.prompt}]
        if self.system_prompt and messages[0].get("role") != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    async def run_async(self) -> list[Experience]:
        """One episode: replies and tool results until an answer or a limit."""
        assert isinstance(self.args, ToolsWorkflowArgs)
        setup = setup_for(self.args, self.model.tokenizer)
        messages = self._messages()
        conversation = Conversation(self.model, setup.renderer.prompt(messages))
        calls, errors, end = 0, Counter[str](), "max_turns"
        content = ""
        for turn in range(self.max_turns):
            reply = await conversation.respond_async()
            text = reply.response_text or ""
            parsed = setup.parser.parse(text)
            content = parsed.content
            messages.append({"role": "assistant", "content": text})
            if not parsed.has_calls:
                end = "answer"
                break
            if calls + len(parsed.calls) > self.max_tool_calls:
                end = "max_tool_calls"
                break
            if turn + 1 == self.max_turns:
                break  # no reply left to read the results
            results = []
            for call in parsed.calls:  # in order: a tool may depend on an earlier one's effect
                outcome = await setup.toolbox.run(call, self.tool_timeout_s)
                calls += 1
                if outcome.error is not None:
                    errors[outcome.error] += 1
                results.append(
                    {
                        "role": "tool",
                        "name": call.name,
                        "content": _cut(outcome.content, self.max_result_chars),
                    }
                )
            ended = reply.truncate_status is None
            conversation.add_text(setup.renderer.between_turns(messages, results, ended=ended))
            messages += results
        reward = self._reward(content, conversation.turns[-1])
        info = episode_info(
            calls=calls,
            errors=dict(errors),
            turns=len(conversation.turns),
            end=end,
            success=reward is not None and reward >= self.success_threshold,
        )
        if reward is None:  # no reward function applies: no experience (as for single_turn)
            return []
        if self.experience == "episode":
            return [conversation.to_experience(reward, info)]
        return conversation.step_experiences(reward, [info] * len(conversation.turns))

    def _reward(self, answer: str, last: Experience) -> float | None:
        if self.task.reward_fn is None:
            raise WorkflowError("tools needs the run's reward functions (task.reward_fn is None)")
        assert last.tokens is not None
        response = last.tokens[last.prompt_length :].tolist()
        truncated = last.truncate_status is not None
        ids = tuple(response if truncated else response[:-1])
        return self.task.reward_fn([answer], [ids], [truncated])[0]
