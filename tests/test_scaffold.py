"""``trinity plugins new``: a fresh scaffold of every kind installs (a real wheel build) and passes the
conformance kit and its own tests unchanged."""

from __future__ import annotations

import importlib.metadata as md
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
    "experience_operator",
    "priority_fn",
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
    assert {f"trinity_plugin_fresh_{kind}" for kind in kinds} <= {p.name for p in target.iterdir()}
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
            "-q",
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


def _component_module(tmp_path: Path, name: str, kind: str) -> object:
    """The component module of a fresh scaffold, imported from its file."""
    import importlib.util

    root = write_scaffold(name, kind, tmp_path)
    spec = importlib.util.spec_from_file_location(
        f"{name}_{kind}", root / f"trinity_plugin_{name}" / f"{kind}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
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
