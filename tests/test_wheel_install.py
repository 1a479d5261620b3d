"""A third-party plugin, built as a wheel and installed into a fresh environment, is found by name.

The test writes a small setuptools project providing one policy loss, builds a real wheel from it (not an
editable install), installs the wheel into a new virtual environment and, in subprocesses running that
environment's interpreter, checks that ``trinity plugins list --json`` reports the plugin with its
distribution name and version and that ``registry.create`` builds it and computes the loss. The parent
environment (the one running pytest) must not see the plugin.

Creating a venv with torch from scratch would take minutes, so the fresh venv has no packages of its
own except the plugin: a ``.pth`` file runs ``site.addsitedir`` on the parent's site directories (plain
path lines would not do, since the editable install of trinity-core is itself a ``.pth`` import hook
that only ``addsitedir`` processes). Its own site-packages comes first on ``sys.path``.

Tools, first found wins: wheel builder ``python -m build`` (with setuptools, no isolation), then
``pip wheel``, then ``uv build``; installer ``uv pip install``, then ``pip --python``. None missing
is a failure naming what to install, never a skip.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from trinity_core import registry

TOOL_TIMEOUT_S = 120
HINT = (
    "install the test tools into this environment: pip install 'build>=1.0' 'setuptools>=68' 'uv>=0.4' "
    "(the `test` extra of trinity-core should provide them)"
)

LOSS_MODULE = '''
"""A scaled REINFORCE loss shipped by a third-party wheel."""

from pydantic import Field

from trinity_core.components import LossAggArgs, PolicyLossFn


class ScaledReinforceLoss(PolicyLossFn):
    """Scaled REINFORCE: L = agg(-scale * A * logp) over the action mask."""

    paper = "https://example.org/scaled-reinforce"

    class Args(LossAggArgs):
        scale: float = Field(1.0, gt=0, description="Multiplies the per-token loss.")

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        per_token = -self.scale * advantages * logprob
        loss = self.aggregate(per_token, action_mask)
        return loss, {"pg_loss": loss.detach()}
'''

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "{version}"
requires-python = ">=3.10"
dependencies = ["trinity-core>=0.1,<0.2"]

[project.entry-points."trinity_core.policy_losses"]
{name} = "{package}.loss:ScaledReinforceLoss"

[tool.setuptools.packages.find]
include = ["{package}*"]
"""

# Run by the fresh interpreter: build the loss by name and evaluate it on a hand-checked batch.
# logprob [[-1, -2], [-0.5, -4]], advantages [[1, 1], [-2, -2]], mask [[1, 1], [1, 0]], scale 3:
# per-token -3*A*logp = [[3, 6], [-3, -24]]; token-mean = (3 + 6 - 3) / 3 = 2.0;
# seq-mean-token-mean = mean((3 + 6) / 2, -3 / 1) = 0.75.
CREATE_SCRIPT = """
import json, sys, torch
from trinity_core import registry

name = sys.argv[1]
logprob = torch.tensor([[-1.0, -2.0], [-0.5, -4.0]])
batch = {
    "old_log_probs": logprob.clone(),
    "response_mask": torch.tensor([[1, 1], [1, 0]], dtype=torch.bool),
    "advantages": torch.tensor([[1.0, 1.0], [-2.0, -2.0]]),
}
out = {}
for mode in ("token-mean", "seq-mean-token-mean"):
    loss_fn = registry.create("policy_loss", name, {"scale": 3.0, "loss_agg_mode": mode}, backend="verl")
    loss, metrics = loss_fn(logprob, **batch)
    out[mode] = [loss.item(), metrics["pg_loss"].item()]
rec = registry.record("policy_loss", name)
out.update(
    cls=rec.obj.__name__, registered=rec.obj.name(), file=sys.modules[rec.obj.__module__].__file__,
    distribution=rec.distribution, version=rec.version, select_keys=loss_fn.select_keys,
)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Installed:
    """The plugin as installed into the fresh environment."""

    dist: str
    version: str
    name: str
    package: str
    python: Path
    site_packages: Path
    workdir: Path


def _run(cmd: list[str], what: str, *, cwd: Path, env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} took longer than {TOOL_TIMEOUT_S} s: {' '.join(cmd)}")
    if proc.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def _uv() -> str | None:
    """The uv executable: on PATH, beside this interpreter, or from the ``uv`` Python package."""
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if found:
        return found
    if importlib.util.find_spec("uv") is not None:
        from uv import find_uv_bin

        return str(find_uv_bin())
    return None


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _build_wheel(project: Path, outdir: Path) -> Path:
    """Build ``project`` into a wheel in ``outdir`` with the first available builder."""
    if _has("build", "setuptools"):
        cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir), "."]
    elif _has("pip", "setuptools"):
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(outdir),
            ".",
        ]
    elif (uv := _uv()) is not None:
        cmd = [uv, "build", "--wheel", "--out-dir", str(outdir), "."]
    else:
        pytest.fail(
            f"no wheel builder: neither `build`+setuptools, pip+setuptools nor uv is available; {HINT}"
        )
    _run(cmd, "building the plugin wheel", cwd=project)
    wheels = sorted(outdir.glob("*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {outdir}, found {[w.name for w in wheels]}"
    return wheels[0]


def _parent_site_dirs() -> list[str]:
    """Directories the fresh environment must see: this interpreter's site dirs and the path entries
    that hold trinity_core and torch (when they come from somewhere else, e.g. PYTHONPATH)."""
    paths = sysconfig.get_paths()
    dirs = [paths["purelib"], paths["platlib"]]
    for entry in sys.path:
        if entry and any((Path(entry) / pkg).is_dir() for pkg in ("trinity_core", "torch")):
            dirs.append(entry)
    return list(dict.fromkeys(os.path.abspath(d) for d in dirs))


def _fresh_venv(root: Path) -> tuple[Path, Path]:
    """A new venv without pip that sees the parent's packages after its own; returns (python, site)."""
    _run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)], "creating the fresh venv", cwd=root.parent
    )
    python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site_dir = _run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        "locating the fresh venv's site-packages",
        cwd=root.parent,
    ).strip()
    calls = "; ".join(f"site.addsitedir({d!r})" for d in _parent_site_dirs())
    (Path(site_dir) / "zz_parent_env.pth").write_text(f"import site; {calls}\n", encoding="utf-8")
    return python, Path(site_dir)


def _install_wheel(wheel: Path, python: Path, cwd: Path) -> None:
    """Install ``wheel`` (without dependencies) into the environment of ``python``."""
    if (uv := _uv()) is not None:
        cmd = [uv, "pip", "install", "--python", str(python), "--no-deps", "--offline", str(wheel)]
    elif _has("pip"):
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ]
    else:
        pytest.fail(f"no installer: neither uv nor pip is available; {HINT}")
    _run(cmd, "installing the plugin wheel into the fresh venv", cwd=cwd)


def _child_env() -> dict[str, str]:
    """The parent's environment minus what would leak the parent's path or plugin settings."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.pop("TRINITY_DISABLE_PLUGINS", None)
    env.pop("TRINITY_STRICT_PLUGINS", None)  # unrelated parent plugins must not fail this listing
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Write, build and install the plugin once for this module."""
    tmp = tmp_path_factory.mktemp("wheel_install")
    tag = uuid.uuid4().hex[:8]
    dist, version, name = f"trinity-plugin-wheeltest-{tag}", "0.3.1", f"wheeltest_{tag}"
    package = f"trinity_plugin_wheeltest_{tag}"

    project = tmp / "project"
    (project / package).mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        textwrap.dedent(PYPROJECT).format(dist=dist, version=version, name=name, package=package),
        encoding="utf-8",
    )
    (project / package / "__init__.py").write_text('"""Wheel install test plugin."""\n', encoding="utf-8")
    (project / package / "loss.py").write_text(textwrap.dedent(LOSS_MODULE), encoding="utf-8")

    wheel = _build_wheel(project, tmp / "dist")
    assert wheel.name.startswith(f"{package}-{version}-"), wheel.name
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    python, site_dir = _fresh_venv(tmp / "venv")
    _install_wheel(wheel, python, tmp)
    workdir = tmp / "work"  # empty cwd: neither the project sources nor the repo can be imported from it
    workdir.mkdir()
    return Installed(dist, version, name, package, python, site_dir, workdir)


def test_fresh_env_lists_wheel_plugin_with_distribution_and_version(installed: Installed) -> None:
    out = _run(
        [
            str(installed.python),
            "-m",
            "trinity_core.cli.main",
            "plugins",
            "list",
            "--json",
            "--kind",
            "policy_loss",
        ],
        "`trinity plugins list --json` in the fresh venv",
        cwd=installed.workdir,
        env=_child_env(),
    )
    payload = json.loads(out)
    mine = [c for c in payload["components"] if c["name"] == installed.name]
    assert mine == [
        {
            "kind": "policy_loss",
            "name": installed.name,
            "value": f"{installed.package}.loss:ScaledReinforceLoss",
            "distribution": installed.dist,
            "version": installed.version,
            "summary": "Scaled REINFORCE: L = agg(-scale * A * logp) over the action mask.",
            "paper": "https://example.org/scaled-reinforce",
        }
    ]
    failed = [f for f in payload["failures"] if f["entry_point"]["distribution"] == installed.dist]
    assert failed == []
    assert [c for c in payload["conflicts"] if c["name"] == installed.name] == []


def test_fresh_env_creates_and_runs_wheel_plugin(installed: Installed) -> None:
    out = _run(
        [str(installed.python), "-c", CREATE_SCRIPT, installed.name],
        "registry.create of the wheel plugin in the fresh venv",
        cwd=installed.workdir,
        env=_child_env(),
    )
    result = json.loads(out)
    assert result["token-mean"] == pytest.approx([2.0, 2.0])
    assert result["seq-mean-token-mean"] == pytest.approx([0.75, 0.75])
    assert result["cls"] == "ScaledReinforceLoss"
    assert result["registered"] == installed.name
    assert (result["distribution"], result["version"]) == (installed.dist, installed.version)
    assert result["select_keys"] == ["response_mask", "advantages"]
    # Imported from the installed wheel in the fresh venv, not from the project sources.
    assert Path(result["file"]).resolve().is_relative_to(installed.site_packages.resolve())


def test_parent_env_does_not_see_wheel_plugin(installed: Installed) -> None:
    with pytest.raises(md.PackageNotFoundError):
        md.distribution(installed.dist)
    assert importlib.util.find_spec(installed.package) is None
    fresh = registry.Registry()
    assert installed.name not in fresh.names("policy_loss")
    with pytest.raises(registry.UnknownComponentError, match=installed.name):
        fresh.resolve("policy_loss", installed.name)
