"""``trinity plugins new``: a fresh scaffold of every kind installs (a real wheel build) and passes the
conformance kit and its own tests unchanged."""

from __future__ import annotations

import importlib.metadata as md
import itertools
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trinity_core.cli.main import main
from trinity_core.cli.scaffold import ScaffoldError, scaffold_kinds, write_scaffold
from trinity_core.registry import PLUGIN_API_VERSION, get_kind

ISSUE_KINDS = (
    "algorithm",
    "advantage_fn",
    "add_strategy",
    "policy_loss",
    "kl_fn",
    "entropy_loss",
    "reward_fn",
    "task",
    "value_loss",
    "workflow",
    "task_selector",
    "operator",
    "priority_fn",
    "tool_parser",
)


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


def test_every_kind_has_a_scaffold() -> None:
    assert set(ISSUE_KINDS) <= set(scaffold_kinds())


def test_the_scaffold_declares_the_entry_point_and_the_api_version(tmp_path: Path) -> None:
    assert main(["plugins", "new", "my_loss", "--kind", "policy_loss", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "trinity-plugin-my-loss"
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == "trinity-plugin-my-loss"
    group = get_kind("policy_loss").namespace
    assert project["entry-points"][group] == {"my_loss": "trinity_plugin_my_loss.policy_loss:MyLossLoss"}
    assert (
        f'TRINITY_API_VERSION = "{PLUGIN_API_VERSION}"'
        in (root / "trinity_plugin_my_loss/__init__.py").read_text()
    )
    assert 'distribution = "trinity-plugin-my-loss"' in (root / "tests/test_conformance.py").read_text()
    assert {"README.md", "tox.ini"} <= {p.name for p in root.iterdir()}


def test_bad_requests_fail_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ScaffoldError, match="lowercase Python identifier"):
        write_scaffold("My-Loss", "policy_loss", tmp_path)
    with pytest.raises(ScaffoldError, match="no scaffold for kind 'nothing'"):
        write_scaffold("x", "nothing", tmp_path)
    write_scaffold("twice", "kl_fn", tmp_path)
    assert main(["plugins", "new", "twice", "--kind", "kl_fn", "--dir", str(tmp_path)]) == 1
    assert "exists already" in capsys.readouterr().err


@pytest.mark.skipif(
    not _installed("trinity-plugin-grpo"), reason="the algorithm scaffold names grpo's components"
)
def test_fresh_scaffolds_of_every_kind_install_and_pass_the_kit(tmp_path: Path) -> None:
    kinds = scaffold_kinds()
    roots = [write_scaffold(f"fresh_{kind}", kind, tmp_path / "src") for kind in kinds]
    roots.append(write_scaffold("fresh_multi_turn", "workflow", tmp_path / "src", multi_turn=True))
    target = tmp_path / "site"
    # A real build and install (no network: no deps, the build backend of this environment).
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(target),
    ]
    subprocess.run([*pip, *map(str, roots)], check=True, capture_output=True, text=True)
    packages = {f"trinity_plugin_fresh_{kind}" for kind in kinds} | {"trinity_plugin_fresh_multi_turn"}
    assert packages <= {p.name for p in target.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(target), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("TRINITY_DISABLE_PLUGINS", None)
    tests = [str(r / "tests") for r in roots]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *tests,
            "-p",
            "trinity_core.testing.plugin",
            "-v",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
    assert "failed" not in run.stdout
    for check in ("workflow_returns_usable_experiences", "workflow_ids_are_distinct"):
        assert f"[workflow:fresh_multi_turn:{check}] PASSED" in run.stdout


def _component_module(tmp_path: Path, name: str, kind: str, *, multi_turn: bool = False) -> object:
    """The component module of a fresh scaffold, imported from its file."""
    import importlib.util

    root = write_scaffold(name, kind, tmp_path, multi_turn=multi_turn)
    spec = importlib.util.spec_from_file_location(
        f"{name}_{kind}", root / f"trinity_plugin_{name}" / f"{kind}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the module's annotations through it
    spec.loader.exec_module(module)
    return module


def test_the_value_loss_scaffold_computes_its_docstrings_huber_loss(tmp_path: Path) -> None:
    import torch

    loss_cls = _component_module(tmp_path, "huber_t", "value_loss").HuberTValueLoss  # type: ignore[attr-defined]
    loss_fn = loss_cls(delta=1.0)
    vpreds = torch.tensor([[0.5, 3.0, float("nan")]], requires_grad=True)
    returns, mask = torch.zeros(1, 3), torch.tensor([[True, True, False]])
    loss, metrics = loss_fn(vpreds, vpreds.detach(), returns, mask, loss_agg_mode="token-mean")
    # By hand: |0.5| <= 1 gives 0.5^2 / 2 = 0.125; |3| > 1 gives 1 * (3 - 1 / 2) = 2.5; the mean of the two.
    assert loss.item() == pytest.approx((0.125 + 2.5) / 2)
    assert metrics["vf_loss"].item() == pytest.approx(1.3125)
    loss.backward()
    assert vpreds.grad is not None
    assert vpreds.grad.tolist()[0][:2] == pytest.approx([0.5 / 2, 1.0 / 2])  # e, then delta * sign(e)
    assert vpreds.grad[0, 2].item() == 0.0


def test_multi_turn_is_a_variant_of_the_workflow_scaffold_only(tmp_path: Path) -> None:
    with pytest.raises(ScaffoldError, match="--multi-turn is a variant of the workflow scaffold"):
        write_scaffold("x", "policy_loss", tmp_path, multi_turn=True)
    assert main(["plugins", "new", "game", "--kind", "workflow", "--multi-turn", "--dir", str(tmp_path)]) == 0
    source = (tmp_path / "trinity-plugin-game" / "trinity_plugin_game" / "workflow.py").read_text()
    assert "Conversation(self.model, self.task.prompt)" in source
    assert max(len(line) for line in source.splitlines()) <= 110  # the scaffold passes the house lint


@pytest.mark.parametrize("experience", ["episode", "step"])
def test_the_multi_turn_workflow_scaffold_plays_until_the_answer_is_right(
    tmp_path: Path, experience: str
) -> None:
    """Wrong first answer, right second one: two turns, the prompt asked again in between (masked out of
    the loss), the return discount**1; per episode one multi_turn experience, per step one per turn."""
    pytest.importorskip("transformers", reason="the workflow runs on the tiny model (train extra)")
    import string

    import torch

    from trinity_core.train.models.policy import build_char_tokenizer, tiny_model
    from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks

    cls = _component_module(tmp_path, "game_t", "workflow", multi_turn=True).GameTWorkflow  # type: ignore[attr-defined]
    tokenizer = build_char_tokenizer(string.printable)
    engine = GenerationEngine(
        tiny_model(len(tokenizer), {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1}),
        tokenizer,
        {"max_new_tokens": 3, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": False},
    )
    args = {"max_turns": 4, "discount": 0.5, "experience": experience}
    runner = WorkflowRunner("game_t", cls, args, engine, max_calls=16)
    [task] = make_tasks(cls, [{"prompt": "1+2="}], step=0, task_offset=0, repeat_times=1)
    calls: list[str] = []

    def judge(completions: list[str], ids: list[tuple[int, ...]], truncated: list[bool]) -> list[float]:
        calls.extend(completions)
        return [1.0 if len(calls) == 2 else 0.0]  # the second answer is right

    task.reward_fn = judge
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        outcome = runner.run([task])
    assert not outcome.failures
    assert len(calls) == 2  # it stopped at the right answer
    exps = outcome.experiences
    if experience == "episode":
        [exp] = exps
        assert exp.reward == 0.5
        assert exp.info["turns"] == 2
        assert exp.experience_type == "multi_turn"
        mask = exp.action_mask
        assert mask is not None
        asked_again = len(tokenizer("1+2=", add_special_tokens=False)["input_ids"])
        # model, environment (the prompt asked again, masked out), model
        runs = [len(list(group)) for _, group in itertools.groupby(mask.tolist())]
        assert len(runs) == 3
        assert runs[1] == asked_again
        assert not mask.tolist()[runs[0]]
    else:
        assert [e.eid.step for e in exps] == [0, 1]
        assert [e.reward for e in exps] == [0.5, 0.5]
