"""Source templates of ``trinity plugins new``: one component module per kind, and the files around it.

Placeholders (``string.Template``): ``$name`` (component name), ``$cls`` (class name), ``$pkg`` (import
package), ``$dist`` (distribution), ``$module`` (module of the component), ``$group`` (entry-point
namespace), ``$api`` (the core API version the scaffold is built for).
"""

from __future__ import annotations

from trinity_core.cli.scaffold_buffer_templates import BUFFER_COMPONENTS
from trinity_core.cli.scaffold_tensor_templates import TENSOR_COMPONENTS

__all__ = ["COMPONENTS", "FILES", "KIND_TESTS", "MULTI_TURN_WORKFLOW"]

COMPONENTS: dict[str, tuple[str, str]] = {
    **TENSOR_COMPONENTS,
    **BUFFER_COMPONENTS,
    "algorithm": (
        "Algorithm",
        '''"""``$name`` algorithm preset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset


class $cls(AlgorithmPreset):
    """$name: GRPO group advantages with the PPO clipped loss and no KL term.

    TODO: name your components and defaults; every name must be installed (see `trinity plugins list`).
    """

    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": 4,
        "advantage_fn": "grpo",
        "policy_loss_fn": "ppo",
        "policy_loss_fn_args": {"clip_range": 0.2},
        "kl_loss_fn": "none",
        "kl_penalty_fn": "none",
        "entropy_loss_fn": "default",
    }
''',
    ),
    "reward_fn": (
        "",
        '''"""``$name`` reward function."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def $name(
    prompts: Sequence[str], completions: Sequence[str], answer: Sequence[Any], **kwargs: Any
) -> list[float]:
    """$name: 1.0 when the completion equals the answer after stripping whitespace, else 0.0.

    TODO: replace this rule with yours; one float per completion.
    """
    return [1.0 if c.strip() == str(a).strip() else 0.0 for c, a in zip(completions, answer, strict=True)]
''',
    ),
    "task": (
        "Task",
        '''"""``$name`` task set."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs
from trinity_core.train.data.tasks import Task


class _Args(ComponentArgs):
    digits: int = Field(1, ge=1, le=6, description="Digits of each operand.")


class $cls(Task):
    """$name: prompt "a+b=", answer the last digit of a + b.

    TODO: replace the rows with your task's; `fields` names every field a row has (prompt first).
    """

    Args = _Args
    digits: int

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``answer``."""
        return ("prompt", "answer")

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """Operands uniform in [0, 10**digits)."""
        ab = torch.randint(0, 10**self.digits, (n, 2), generator=generator).tolist()
        return [{"prompt": f"{a}+{b}=", "answer": str((a + b) % 10)} for a, b in ab]

    def max_response_tokens(self) -> int:
        """One digit and EOS."""
        return 2
''',
    ),
    "workflow": (
        "Workflow",
        '''"""``$name`` workflow."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from trinity_core.components import ComponentArgs, Workflow
from trinity_core.experience import Experience


class $cls(Workflow):
    """$name: the task's prompt in ``template``, ``task.repeat_times`` responses, each scored by the run's
    reward functions (0.0 where none applies).

    TODO: replace the body with your workflow: several turns (``self.model.chat``), tools, your own
    reward. Set ``eid.run`` of each experience (``eid.step`` too when you return one per turn).
    """

    can_repeat: ClassVar[bool] = True

    class Args(ComponentArgs):
        template: str = Field("{prompt}", description="How the prompt is shown; {prompt} is the task's.")

    template: str

    def run(self) -> list[Experience]:
        """Sample the responses and reward them."""
        prompt = self.template.format(prompt=self.task.prompt)
        exps = self.model.generate([prompt], n=self.task.repeat_times)
        rewards: list[float | None] = [None] * len(exps)
        if self.task.reward_fn is not None:
            ids, truncated = [], [e.truncate_status is not None for e in exps]
            for exp, cut in zip(exps, truncated, strict=True):
                response = exp.tokens[exp.prompt_length :].tolist() if exp.tokens is not None else []
                ids.append(tuple(response if cut else response[:-1]))  # without the closing EOS
            rewards = self.task.reward_fn([e.response_text or "" for e in exps], ids, truncated)
        for run, (exp, reward) in enumerate(zip(exps, rewards, strict=True)):
            exp.reward = 0.0 if reward is None else float(reward)
            exp.eid.run = self.task.run_id_base + run
        return exps
''',
    ),
    "tool_parser": (
        "ToolParser",
        '''"""``$name`` tool parser."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from trinity_core.components import ParsedReply, ToolCall, ToolParser


class $cls(ToolParser):
    """$name: after the reply's text, one call per line: ``CALL {"name": ..., "arguments": {...}}``.

    TODO: replace the format with your model family's (trinity-plugin-tools' parsers show two). Never
    raise on what the model writes: a call you cannot read is a ToolCall with ``error`` set.
    """

    MARKER: ClassVar[str] = "CALL "
    EXAMPLE: ClassVar[str] = 'CALL {"name": "<tool>", "arguments": {"<argument>": <value>}}'

    def parse(self, text: str) -> ParsedReply:
        """Lines starting with the marker are calls; the other lines are the content."""
        content: list[str] = []
        calls: list[ToolCall] = []
        for line in text.split("\\n"):
            if line.startswith(self.MARKER):
                calls.append(self._read(line[len(self.MARKER) :]))
            else:
                content.append(line)
        return ParsedReply("\\n".join(content).strip(), tuple(calls))

    def _read(self, body: str) -> ToolCall:
        try:
            value: Any = json.loads(body)
        except json.JSONDecodeError as exc:
            return ToolCall("", error="the call is not valid JSON (" + exc.msg + "); write " + self.EXAMPLE)
        name = value.get("name") if isinstance(value, dict) else None
        arguments = value.get("arguments", {}) if isinstance(value, dict) else None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            return ToolCall("", error="a call needs a name and an arguments object; write " + self.EXAMPLE)
        return ToolCall(name, arguments)

    def format(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """The content, then one marker line per call."""
        lines = [self.MARKER + json.dumps({"name": c.name, "arguments": c.arguments}) for c in calls]
        return "\\n".join([content, *lines] if content else lines)
''',
    ),
}
"""Kind -> (class name suffix, module source). A kind without an entry has no scaffold yet."""

MULTI_TURN_WORKFLOW = (
    "Workflow",
    '''"""``$name`` workflow: a multi-turn episode, kept as tokens by ``Conversation``."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from trinity_core.components import ComponentArgs, Workflow
from trinity_core.experience import Experience
from trinity_core.workflows import Conversation


class $cls(Workflow):
    """$name: the model answers the task's prompt; a wrong answer gets ``feedback`` and another try, up to
    ``max_turns`` answers; the return is ``discount ** t`` for a right answer at turn ``t`` (0-based), else 0.

    An answer is right when the run's reward functions give it 1. TODO: replace this environment (the
    reward functions as judge, ``feedback`` as its reply) with yours: a game, a tool, a user simulator.
    The environment's text is masked out of the loss; only the model's tokens are trained.
    """

    class Args(ComponentArgs):
        max_turns: int = Field(3, ge=1, description="Answers the model may give in one episode.")
        feedback: str = Field(
            "{prompt}", description="The environment's reply to a wrong answer; {prompt}: the task's prompt."
        )
        discount: float = Field(0.5, gt=0, le=1, description="A right answer at turn t returns discount**t.")
        experience: Literal["episode", "step"] = Field(
            "episode",
            description="'episode': one multi_turn experience per episode; 'step': one per turn (eid.step), "
            "for step-wise algorithms (multi_step_grpo, gigpo).",
        )

    max_turns: int
    feedback: str
    discount: float
    experience: str
    can_repeat: ClassVar[bool] = False  # one instance per run: the explorer sets eid.run

    def _right(self, turn: Experience) -> bool:
        """Whether the run's reward functions give this answer 1 (no reward function: never)."""
        if self.task.reward_fn is None or turn.tokens is None:
            return False
        response = turn.tokens[turn.prompt_length :].tolist()
        cut = turn.truncate_status is not None
        ids = tuple(response if cut else response[:-1])  # without the closing EOS
        [reward] = self.task.reward_fn([turn.response_text or ""], [ids], [cut])
        return reward is not None and reward >= 1.0

    def run(self) -> list[Experience]:
        """One episode: answer, hear the feedback, answer again, until right or out of turns."""
        conversation = Conversation(self.model, self.task.prompt)
        episode_return = 0.0
        for turn in range(self.max_turns):
            reply = conversation.respond()
            if self._right(reply):
                episode_return = self.discount**turn
                break
            if turn + 1 < self.max_turns:
                conversation.add_text(self.feedback.format(prompt=self.task.prompt))
        info = {"turns": len(conversation.turns), "success": episode_return > 0}
        if self.experience == "step":
            return conversation.step_experiences(episode_return, [info] * len(conversation.turns))
        return [conversation.to_experience(episode_return, info)]
''',
)
"""The ``--multi-turn`` variant of the workflow scaffold."""

KIND_TESTS: dict[str, str] = {
    "reward_fn": """from $pkg.$module import $name


def test_rewards_one_float_per_completion() -> None:
    assert $name(["1+1="], ["2", " 2 "][:1], ["2"]) == [1.0]
    assert $name(["1+1=", "1+1="], ["3", " 2 "], ["2", "2"]) == [0.0, 1.0]
""",
    "task": """import torch

from trinity_core.registry import create


def test_rows_have_the_declared_fields() -> None:
    task = create("task", "$name", {})
    rows = task.sample(4, torch.Generator().manual_seed(0))
    assert len(rows) == 4
    assert all(set(task.fields) <= set(row) for row in rows)
""",
}
"""Kinds whose scaffold gets a first test of its own besides the conformance kit (reward functions have no
kit checks; a task set gets the task suite too)."""

FILES: dict[str, str] = {
    "pyproject.toml": """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "The $name $title for trinity-core."
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["trinity-core>=0.1,<0.2"$extra_deps]

[project.optional-dependencies]
test = ["trinity-core[test]"]

[project.entry-points."$group"]
$name = "$pkg.$module:$target"

[tool.setuptools.packages.find]
include = ["$pkg*"]

[tool.pytest.ini_options]
testpaths = ["tests"]
""",
    "README.md": """# $dist

The `$name` $title for trinity-core (entry point `$name` in `$group`).

```bash
pip install -e '.[test]'       # with trinity-core installed
pytest                          # the conformance kit and this plugin's own tests
trinity plugins show $name      # what trinity sees
```

Fill in `$pkg/$module.py`: the docstring's first line is the formula; the body computes it.
""",
    "tox.ini": """[tox]
env_list = py

[testenv]
description = the conformance kit and this plugin's tests, on the installed trinity-core
extras = test
commands = pytest {posargs}
""",
    "$pkg/__init__.py": '''"""$dist: the `$name` $title for trinity-core."""

TRINITY_API_VERSION = "$api"
"""The trinity-core plugin API this distribution was built for (checked when it loads)."""
''',
    "tests/test_conformance.py": """from trinity_core.testing import PluginConformance


class TestConformance(PluginConformance):
    distribution = "$dist"
""",
}
"""Files of every scaffold (paths are templates too)."""
