"""Bad configuration fails before the first step with one line and exit status 1; the model's own
mistakes (tested in test_workflow.py) never do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trinity_core.cli.main import main

TINY = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 1024,
}

IGNORES_TOOLS = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
"""A chat template without a word about tools (as many base models' templates are)."""


def config(**workflow_args: Any) -> dict[str, Any]:
    """Two steps of the tools workflow on the multiplication task with a tiny model."""
    return {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {"name": "multiplication", "eval_size": 0},
        "rollout": {
            "prompts_per_step": 2,
            "max_new_tokens": 8,
            "workflow": "tools",
            "workflow_args": {"tools": ["trinity_plugin_tools.multiply"], **workflow_args},
        },
        "trainer": {"total_steps": 2, "checkpoint_every": 0, "progress": False, "threads": 1},
        "model": {"config": TINY},
    }


def fails_with(tmp_path: Path, capsys: pytest.CaptureFixture[str], cfg: dict[str, Any]) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    return lines[0]


PREFIX = "trinity train: error: rollout.workflow_args: workflow 'tools' cannot run: "


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (
            ["no_such_module.fn"],
            "tools[0]: 'no_such_module.fn' does not import: ModuleNotFoundError: No module named "
            "'no_such_module'; give the dotted path of a function in an installed module (e.g. "
            "trinity_plugin_tools.python)",
        ),
        (
            ["trinity_plugin_tools.multiply", "trinity_plugin_tools.nope"],
            "tools[1]: 'trinity_plugin_tools.nope' does not exist: module 'trinity_plugin_tools' has no "
            "attribute 'nope'",
        ),
        (["math.pi"], "tools[0]: 'math.pi' is a float, not a function; name a function"),
        (
            ["tools_support.untyped"],
            "tools[0]: 'tools_support.untyped' has no JSON schema: Argument x is missing a type hint in "
            "function untyped; tools follow TRL's convention: type hints on every argument and a "
            "Google-style docstring",
        ),
        (
            ["tools_support.undocumented"],
            "tools[0]: 'tools_support.undocumented' has no JSON schema: Cannot generate JSON schema for "
            "undocumented because it has no docstring!",
        ),
        (
            ["trinity_plugin_tools.multiply", "tools_support.multiply_again"],
            "two tools are named 'multiply' (trinity_plugin_tools.multiply and tools_support.multiply_again)",
        ),
    ],
)
def test_a_tool_that_cannot_be_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tools: list[str], message: str
) -> None:
    line = fails_with(tmp_path, capsys, config(tools=tools))
    assert line.startswith(PREFIX + message), line


def test_an_unknown_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_with(tmp_path, capsys, config(parser="qwen9"))
    assert line.startswith(
        PREFIX + "parser: unknown tool parser 'qwen9' (kind 'tool_parser', entry-point namespace "
        "trinity_core.tool_parsers). Installed tool parser names: hermes, mistral."
    ), line


def test_a_chat_template_that_ignores_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tokenizer's template (model.chat_template) renders no tools: refused, with how to give one."""
    template = tmp_path / "plain.jinja"
    template.write_text(IGNORES_TOOLS)
    cfg = config()
    cfg["model"]["chat_template"] = str(template)
    line = fails_with(tmp_path, capsys, cfg)
    assert line == (
        PREFIX + "the chat template ignores `tools` (the prompt is the same with and without them), so the "
        "model would never see its tools; give a template that renders tools and tool messages: "
        "workflow_args.chat_template: tools (the plugin's), a .jinja file (e.g. the template of a "
        "tool-using model such as Qwen2.5-Instruct), or model.chat_template"
    )


def test_the_same_template_through_the_workflow_args(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "plain.jinja"
    template.write_text(IGNORES_TOOLS)
    line = fails_with(tmp_path, capsys, config(chat_template=str(template)))
    assert line.startswith(PREFIX + "the chat template ignores `tools`")
    line = fails_with(tmp_path, capsys, config(chat_template=str(tmp_path / "missing.jinja")))
    assert line.startswith(PREFIX + f"chat_template '{tmp_path / 'missing.jinja'}' is neither a shipped")


def test_a_template_without_tool_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "no_tool_role.jinja"
    template.write_text(
        "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{% if m.role != 'tool' %}"
        "{{ m.content }}\n{% endif %}{% endfor %}"
    )
    line = fails_with(tmp_path, capsys, config(chat_template=str(template)))
    assert line.startswith(PREFIX + "the chat template leaves out messages with role 'tool'")


def test_bad_workflow_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_with(tmp_path, capsys, config(max_turns=0, toolz=[]))
    assert line == (
        "trinity train: error: bad arguments for workflow 'tools': rollout.workflow_args.max_turns: Input "
        "should be greater than or equal to 1 (got 0); rollout.workflow_args.toolz: unknown key; did you "
        "mean 'tools'? allowed keys: chat_template, experience, max_result_chars, max_tool_calls, "
        "max_turns, parser, success_threshold, system_prompt, tool_timeout_s, tools"
    )
