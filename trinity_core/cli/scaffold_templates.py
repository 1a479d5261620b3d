"""Source templates of ``trinity plugins new``: one component module per kind, and the files around it.

Placeholders (``string.Template``): ``$name`` (component name), ``$cls`` (class name), ``$pkg`` (import
package), ``$dist`` (distribution), ``$module`` (module of the component), ``$group`` (entry-point
namespace), ``$api`` (the core API version the scaffold is built for).
"""

from __future__ import annotations

__all__ = ["COMPONENTS", "FILES", "KIND_TESTS"]

COMPONENTS: dict[str, tuple[str, str]] = {
    "policy_loss": (
        "Loss",
        '''"""``$name`` policy loss."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import LossAggArgs, PolicyLossFn


class $cls(PolicyLossFn):
    """$name: L = agg(max(-A r, -A clip(r, 1 - eps, 1 + eps))), r = exp(logp - old_logp).

    TODO: replace this formula (first line: what it computes) and the body with your loss.
    """

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, description="Clip epsilon of the ratio.")

    def __call__(
        self, logprob: torch.Tensor, old_logprob: torch.Tensor, action_mask: torch.Tensor,
        advantages: torch.Tensor, **kwargs: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The aggregated loss and detached metrics."""
        log_ratio = torch.where(action_mask, logprob - old_logprob, 0.0).clamp(-20, 20)
        ratio = torch.exp(log_ratio)
        adv = torch.where(action_mask, advantages, 0.0)
        clipped = ratio.clamp(1 - self.clip_range, 1 + self.clip_range)
        loss = self.aggregate(torch.maximum(-adv * ratio, -adv * clipped), action_mask)
        return loss, {"pg_loss": loss.detach()}
''',
    ),
    "advantage_fn": (
        "Advantage",
        '''"""``$name`` group advantage."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs, GroupAdvantage, summarize_metric, write_advantages
from trinity_core.ops import group_stats


def _advantages(rewards: torch.Tensor, index: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    stats = group_stats(rewards, index, groups)
    std = stats.std_unbiased[index]
    dev = rewards - stats.mean[index]
    return torch.where(std > 0, dev / (std + eps), torch.zeros_like(dev))


class $cls(GroupAdvantage):
    """$name: A_i = (r_i - mean_g(r)) / (std_g(r) + eps) over the responses to one task; 0 if std is 0.

    TODO: replace this formula (first line: what it computes) and the body with your advantage.
    """

    class Args(ComponentArgs):
        epsilon: float = Field(1e-6, gt=0, description="Added to the group std.")

    def calculate_group_advantage(self, group_id: Any, exps: Any, precomputed_std: Any = None) -> Any:
        """One group: write each experience's advantage."""
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        adv = _advantages(rewards, torch.zeros(len(exps), dtype=torch.int64), 1, self.epsilon)
        write_advantages(exps, adv)
        return exps, {"reward_mean": rewards.mean()}

    def process_batch(self, batch: Any) -> Any:
        """Every group at once (vectorised; statistics in float64)."""
        index, groups = batch.group_index["task"], batch.num_groups["task"]
        adv = _advantages(batch.rewards, index, groups, self.epsilon)
        means = group_stats(batch.rewards, index, groups).mean
        return adv, summarize_metric(means, "reward_mean", self.metric_prefix)
''',
    ),
    "add_strategy": (
        "Strategy",
        '''"""``$name`` add strategy."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs, GroupAdvantageStrategy, write_advantages
from trinity_core.ops import group_stats


class $cls(GroupAdvantageStrategy):
    """$name: A_i = s (r_i - mean_g(r)), written with the group to the buffer.

    TODO: replace this formula (first line: what it computes) and the body with your strategy.
    """

    class Args(ComponentArgs):
        scale: float = Field(1.0, gt=0, description="Multiplies the advantages.")

    def calculate_group_advantage(self, group_id: Any, exps: Any) -> Any:
        """One group: write each experience's advantage."""
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        stats = group_stats(rewards, torch.zeros(len(exps), dtype=torch.int64), 1)
        write_advantages(exps, (rewards - stats.mean[0]) * self.scale)
        return exps, {}
''',
    ),
    "kl_fn": (
        "KL",
        '''"""``$name`` KL estimator."""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.components import KLFn


class $cls(KLFn):
    """$name: k = 0.5 (logp - ref_logp)^2 per token (masked positions neutralised first).

    TODO: replace this formula (first line: what it computes) and the body with your estimator.
    """

    def calculate_kl(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, old_logprob: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-token estimate."""
        return 0.5 * (logprob - ref_logprob).square()

    def calculate_kl_loss(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, response_mask: torch.Tensor,
        loss_agg_mode: Any = None, old_logprob: Any = None, loss_scale: Any = None,
    ) -> Any:
        """The aggregated loss; masked positions never reach the estimator (no NaN leaks)."""
        m = response_mask.bool()
        return super().calculate_kl_loss(
            torch.where(m, logprob, 0.0), torch.where(m, ref_logprob, 0.0), response_mask, loss_agg_mode,
            old_logprob, loss_scale,
        )
''',
    ),
    "entropy_loss": (
        "Entropy",
        '''"""``$name`` entropy term."""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.components import EntropyLossFn


class $cls(EntropyLossFn):
    """$name: entropy_coef * agg(H, action_mask); the trainer subtracts it from the loss.

    TODO: replace this formula (first line: what it computes) and the body with your term.
    """

    def __call__(
        self, entropy: torch.Tensor, action_mask: torch.Tensor, **kwargs: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The weighted term and its detached value."""
        value = self.aggregate(entropy, action_mask)
        return value * self.entropy_coef, {"entropy_loss": value.detach()}
''',
    ),
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
from trinity_core.train.tasks import Task


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
    "value_loss": (
        "ValueLoss",
        '''"""``$name`` value loss."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from trinity_core.components import ValueLossFn


class $cls(ValueLossFn):
    """$name: agg(huber_d(V - G)), huber_d(e) = e^2 / 2 where |e| <= d, else d (|e| - d / 2).

    ``V`` are the critic's predictions, ``G`` the returns. TODO: replace this formula (first line: what
    it computes) and the body with your value loss.
    """

    class Args(ValueLossFn.Args):
        delta: float = Field(1.0, gt=0, description="Error beyond which the loss grows linearly.")

    delta: float

    def __call__(
        self, vpreds: torch.Tensor, values: torch.Tensor, returns: torch.Tensor, action_mask: torch.Tensor,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The aggregated loss and detached metrics."""
        mask = action_mask.bool()
        err = torch.where(mask, vpreds - returns, 0.0)  # masked positions may hold NaN
        size = err.abs()
        huber = torch.where(size <= self.delta, 0.5 * err.square(), self.delta * (size - 0.5 * self.delta))
        loss = self.aggregate(huber, mask)
        return loss, {"vf_loss": loss.detach()}
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
}
"""Kind -> (class name suffix, module source). A kind without an entry has no scaffold yet."""

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
"""Kinds the conformance kit has no checks for get a first test of their own."""

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
