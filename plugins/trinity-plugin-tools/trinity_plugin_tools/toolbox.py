"""Tools as TRL writes them: plain Python functions (sync or async) with type hints and a Google-style
docstring, named by dotted path, their JSON schema from ``transformers.utils.get_json_schema``.

:func:`load_tools` imports them and builds their schemas (every problem a :class:`ToolSetupError` naming
the path and the fix, raised before the run); :meth:`Toolbox.run` answers one parsed call: the result as
text, or an error message the model sees (unknown tool, bad arguments, timeout, the tool raised), each
with its :data:`ERROR_KINDS` entry for the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import json
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic import ConfigDict

from trinity_core.components import ToolCall

__all__ = ["ERROR_KINDS", "Tool", "ToolOutcome", "ToolSetupError", "Toolbox", "load_tool", "load_tools"]

ERROR_KINDS = ("parse_error", "unknown_tool", "bad_arguments", "timeout", "tool_error")
"""Why a call got an error back: it could not be parsed, names no tool, has arguments that do not fit
the tool's signature, ran past ``tool_timeout_s``, or the tool raised."""

_CONVENTION = (
    "tools follow TRL's convention: type hints on every argument and a Google-style docstring with a "
    "description and an Args: section describing each argument (transformers.utils.get_json_schema)"
)


class ToolSetupError(ValueError):
    """A tool cannot be used (does not import, is not callable, has no JSON schema): found before the run."""


@dataclass(frozen=True)
class Tool:
    """One tool.

    Attributes:
        name: the function's name (what the model calls).
        function: the function (a coroutine function for an async tool).
        schema: its JSON schema (``{"type": "function", "function": {...}}``), given to the chat template.
        arguments: a strict pydantic model of its parameters (JSON types as the schema states them).
        path: where it was loaded from.
    """

    name: str
    function: Callable[..., Any]
    schema: dict[str, Any]
    arguments: type[pydantic.BaseModel]
    path: str

    @property
    def is_async(self) -> bool:
        """Whether calling it gives a coroutine to await."""
        return inspect.iscoroutinefunction(self.function)


@dataclass(frozen=True)
class ToolOutcome:
    """The answer to one call: ``content`` (the result, or the error message) and the error's kind
    (one of :data:`ERROR_KINDS`; None when the tool answered)."""

    content: str
    error: str | None = None


def _resolve(path: str) -> Any:
    """The object at ``path`` (``pkg.module.function``, ``pkg.module:function``, ``pkg.mod.Class.meth``)."""
    module_part, sep, attr_part = path.partition(":")
    parts = module_part.split(".") if not sep else [module_part]
    attrs = attr_part.split(".") if sep else []
    last: BaseException | None = None
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            last = exc
            if exc.name is not None and not name.startswith(exc.name):
                raise  # the module exists but one of its own imports is missing
            continue
        for attr in [*parts[cut:], *attrs]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                raise ToolSetupError(
                    f"{path!r} does not exist: {type(obj).__name__} {name!r} has no attribute {attr!r}"
                ) from None
            name = f"{name}.{attr}"
        return obj
    raise ModuleNotFoundError(str(last))


def _arguments_model(name: str, function: Callable[..., Any]) -> type[pydantic.BaseModel]:
    hints = typing.get_type_hints(function)
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints.get(parameter.name, Any), default)
    config = ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=True)
    model: type[pydantic.BaseModel] = pydantic.create_model(f"{name}_arguments", __config__=config, **fields)
    return model


def load_tool(path: str) -> Tool:
    """The tool at dotted ``path``; :class:`ToolSetupError` when it does not import, is not callable or
    has no JSON schema."""
    from transformers.utils import get_json_schema  # type: ignore[attr-defined]

    try:
        function = _resolve(path)
    except ToolSetupError:
        raise
    except Exception as exc:
        raise ToolSetupError(
            f"{path!r} does not import: {type(exc).__name__}: {exc}; give the dotted path of a function in "
            "an installed module (e.g. trinity_plugin_tools.python)"
        ) from None
    if not callable(function):
        raise ToolSetupError(f"{path!r} is a {type(function).__name__}, not a function; name a function")
    try:
        schema = get_json_schema(function)
    except Exception as exc:
        raise ToolSetupError(f"{path!r} has no JSON schema: {exc}; {_CONVENTION}") from None
    name = schema["function"]["name"]
    return Tool(name, function, schema, _arguments_model(name, function), path)


@functools.lru_cache(maxsize=64)
def load_tools(paths: tuple[str, ...]) -> Toolbox:
    """The tools at ``paths`` (loaded once per process for each list)."""
    tools: dict[str, Tool] = {}
    for path in paths:
        tool = load_tool(path)
        if tool.name in tools:
            raise ToolSetupError(
                f"two tools are named {tool.name!r} ({tools[tool.name].path} and {path}); the model calls "
                "tools by name, so give each a distinct function name"
            )
        tools[tool.name] = tool
    return Toolbox(tools)


def _bad_arguments(tool: Tool, exc: pydantic.ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "missing":
            problems.append(f"{where}: missing")
        elif error["type"] == "extra_forbidden":
            problems.append(f"{where}: no such argument")
        else:
            problems.append(f"{where}: {error['msg']} (got {json.dumps(error.get('input'), default=str)})")
    expected = tool.schema["function"].get("parameters", {}).get("properties", {})
    signature = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in expected.items())
    return f"error: bad arguments for {tool.name}: {'; '.join(problems)}; it takes ({signature})"


def as_text(value: Any) -> str:
    """A tool's return value as the text the model sees: strings as they are, JSON for the rest."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


async def _in_daemon_thread(call: Callable[[], Any]) -> Any:
    """``call()`` in a daemon thread: a sync tool that never returns is abandoned on timeout without
    keeping the process alive at exit (a thread pool would join it)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # timed out and cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        try:
            value, error = call(), None
        except BaseException as exc:
            value, error = None, exc
        # A closed loop (the step ended) raises RuntimeError: nobody waits for this result any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=target, name="tool", daemon=True).start()
    return await future


@dataclass(frozen=True)
class Toolbox:
    """The run's tools by name."""

    tools: dict[str, Tool]

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The tools' JSON schemas, in the configured order (the chat template's ``tools``)."""
        return [tool.schema for tool in self.tools.values()]

    async def run(self, call: ToolCall, timeout_s: float) -> ToolOutcome:
        """Answer ``call``; never raises for anything the call or the tool does."""
        if not call.ok:
            return ToolOutcome(f"error: {call.error}", "parse_error")
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(self.tools) or "none"
            return ToolOutcome(f"error: unknown tool {call.name!r}; the tools are: {known}", "unknown_tool")
        try:
            validated = tool.arguments.model_validate_json(json.dumps(call.arguments))
        except pydantic.ValidationError as exc:
            return ToolOutcome(_bad_arguments(tool, exc), "bad_arguments")
        kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                if tool.is_async:
                    value = await tool.function(**kwargs)
                else:
                    value = await _in_daemon_thread(lambda: tool.function(**kwargs))
        except TimeoutError as exc:
            if deadline.expired():
                message = f"error: {tool.name} did not answer within {timeout_s:g} s"
            else:  # the tool's own limit (the python sandbox's wall-clock or CPU limit)
                message = f"error: {tool.name} timed out: {exc}"
            return ToolOutcome(message, "timeout")
        except Exception as exc:
            return ToolOutcome(f"error: {tool.name} raised {type(exc).__name__}: {exc}", "tool_error")
        return ToolOutcome(as_text(value))
