"""Tool-using agents for trinity-core: function calling and a sandboxed code interpreter.

* ``tools`` (kind ``workflow``): :class:`ToolsWorkflow`, episodes in which the model calls tools (plain
  Python functions, TRL's convention) through the chat template, a tool parser reading its calls;
* ``hermes``, ``mistral`` (kind ``tool_parser``): :class:`HermesParser`, :class:`MistralParser`;
* :func:`python`: the sandboxed code interpreter tool (:mod:`trinity_plugin_tools.sandbox`);
* ``multiplication`` (kind ``task``) and :func:`multiply`: a task that needs a tool.

See docs/workflows.md ("Tools") and this distribution's README.
"""

from __future__ import annotations

from trinity_plugin_tools.arithmetic import MultiplicationTask, multiply
from trinity_plugin_tools.metrics import tool_metrics
from trinity_plugin_tools.parsers import HermesParser, MistralParser
from trinity_plugin_tools.sandbox import (
    SandboxError,
    SandboxLimits,
    SandboxTimeout,
    make_python_tool,
    python,
    run_python,
)
from trinity_plugin_tools.templates import TEMPLATES, ChatRenderer
from trinity_plugin_tools.toolbox import ERROR_KINDS, Toolbox, ToolSetupError, load_tools
from trinity_plugin_tools.workflow import ToolsWorkflow, ToolsWorkflowArgs

__all__ = [
    "ERROR_KINDS",
    "TEMPLATES",
    "ChatRenderer",
    "HermesParser",
    "MistralParser",
    "MultiplicationTask",
    "SandboxError",
    "SandboxLimits",
    "SandboxTimeout",
    "ToolSetupError",
    "Toolbox",
    "ToolsWorkflow",
    "ToolsWorkflowArgs",
    "load_tools",
    "make_python_tool",
    "multiply",
    "python",
    "run_python",
    "tool_metrics",
]
