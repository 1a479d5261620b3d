"""Install by name: scripts/build_wheels.sh builds a wheelhouse, and ``pip install --find-links dist
trinity-plugin-sapo`` into a fresh environment that has only the core (from the wheelhouse) pulls sapo and
the plugins it declares, by name, and ``trinity train`` runs the sapo preset there.

Third-party packages (torch, transformers, ...) come from this environment through a filtered view of
its site-packages (every trinity distribution left out), so nothing is downloaded and the fresh
environment cannot see this checkout's editable installs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAPO_CLOSURE = (
    "trinity-plugin-sapo",
    "trinity-plugin-grpo",
    "trinity-plugin-ppo",
    "trinity-plugin-kl",
    "trinity-plugin-entropy",
)


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _filtered_site(dest: Path) -> Path:
    """Symlinks to this environment's site-packages entries, without anything of trinity."""
    dest.mkdir()
    for site_dir in dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")):
        for entry in Path(site_dir).iterdir():
            lowered = entry.name.lower()
            if "trinity" in lowered or lowered.startswith("__editable__") or (dest / entry.name).exists():
                continue
            (dest / entry.name).symlink_to(entry)
    return dest


@pytest.mark.skipif(sys.platform == "win32", reason="symlinked site view")
@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("accelerate", "transformers")),
    reason="trains: the fresh environment borrows the train extra's packages (tox env all has them)",
)
def test_sapo_installs_by_name_from_the_wheelhouse_and_trains(tmp_path: Path) -> None:
    wheels = tmp_path / "dist"
    projects = [str(ROOT), *(str(ROOT / "plugins" / d) for d in SAPO_CLOSURE)]
    env = {**os.environ, "WHEELHOUSE": str(wheels), "PYTHON": sys.executable}
    _run(["bash", str(ROOT / "scripts" / "build_wheels.sh"), *projects], ROOT, env)
    _run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], tmp_path)
    python = tmp_path / "venv" / "bin" / "python"
    purelib = _run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
    )
    view = _filtered_site(tmp_path / "view")
    (Path(purelib.strip()) / "zz_view.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    child = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "TRINITY_DISABLE_PLUGINS"}
    }
    child.update(PYTHONNOUSERSITE="1", TRINITY_STRICT_PLUGINS="1")
    probe = "import importlib.util as u; print(u.find_spec('trinity_core') is None)"
    assert _run([str(python), "-c", probe], tmp_path, child).strip() == "True"  # only what we install
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "-q",
        "--no-index",
        "--find-links",
        str(wheels),
    ]
    _run([*pip, "trinity-core"], tmp_path, child)
    _run([*pip, "trinity-plugin-sapo"], tmp_path, child)  # by name: sapo and the plugins it declares
    names = "import importlib.metadata as m; print(sorted(d.metadata['Name'] for d in m.distributions()))"
    listing = _run([str(python), "-c", names], tmp_path, child)
    for dist in ("trinity-core", *SAPO_CLOSURE):
        assert dist in listing
    trinity = [str(python), "-m", "trinity_core.cli.main"]
    out = _run(
        [
            *trinity,
            "train",
            "--set",
            "algorithm.algorithm_type=sapo",
            "--set",
            "trainer.total_steps=2",
            "--set",
            "rollout.prompts_per_step=2",
            "--set",
            "algorithm.repeat_times=2",
            "--set",
            "tasks.eval_size=2",
            "--set",
            "trainer.threads=1",
            "--no-progress",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        tmp_path,
        child,
    )
    assert "trained 2 steps" in out
    where = _run(
        [
            str(python),
            "-c",
            "import trinity_plugin_sapo as p, trinity_core as c; print(p.__file__, c.__file__)",
        ],
        tmp_path,
        child,
    )
    assert str(ROOT) not in where  # the installed wheels, not this checkout


BUILD = ROOT / "scripts" / "build_wheels.sh"


def _script(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _broken_python(folder: Path) -> Path:
    """A `python` without setuptools' bdist_wheel, as the outside author's PATH had."""
    folder.mkdir(parents=True)
    shim = folder / "python"
    shim.write_text("#!/bin/sh\necho \"error: invalid command 'bdist_wheel'\" >&2\nexit 1\n")
    shim.chmod(0o755)
    return shim


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_build_wheels_help_is_its_own_and_a_bad_option_is_a_usage_error() -> None:
    done = _script(["--help"], dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: scripts/build_wheels.sh")
    assert "WHEELHOUSE" in done.stdout
    assert "pip wheel [options]" not in done.stdout  # not pip's help
    bad = _script(["--nope"], dict(os.environ))
    assert bad.returncode == 2
    assert "unknown option --nope" in bad.stderr


def _can_build_wheels(python: str) -> bool:
    """Whether `python` has what build_wheels.sh asks of an interpreter (pip, setuptools' bdist_wheel)."""
    probe = (
        "from setuptools.dist import Distribution; Distribution().get_command_class('bdist_wheel'); "
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('pip') is None)"
    )
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
@pytest.mark.skipif(
    not _can_build_wheels(sys.executable),
    reason="this environment has no pip or setuptools>=70.1 to build with (tox env all has them)",
)
def test_build_wheels_skips_a_python_without_build_tools_and_names_the_one_it_uses(tmp_path: Path) -> None:
    """The `python` first on PATH cannot build wheels: the script picks an interpreter that can."""
    broken = _broken_python(tmp_path / "venv" / "bin")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["VIRTUAL_ENV"] = str(tmp_path / "venv")  # an active environment without the build tools
    # The broken `python` first on PATH too; this test's interpreter is the `python3` after it. A shim,
    # not a symlink: a venv's interpreter symlinked elsewhere no longer finds its venv.
    real = tmp_path / "real"
    real.mkdir()
    shim = real / "python3"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(broken.parent), str(real), "/usr/bin", "/bin"])
    env["WHEELHOUSE"] = str(tmp_path / "dist")
    done = _script([str(ROOT / "plugins" / "trinity-plugin-kl")], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "invalid command 'bdist_wheel'" not in done.stderr
    assert "building 1 wheel(s) with " in done.stderr
    assert [p.name.split("-")[0] for p in (tmp_path / "dist").glob("*.whl")] == ["trinity_plugin_kl"]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_build_wheels_refuses_a_python_given_without_build_tools_saying_what_is_missing(
    tmp_path: Path,
) -> None:
    broken = _broken_python(tmp_path / "bin")
    done = _script(["plugins/trinity-plugin-kl"], {**os.environ, "PYTHON": str(broken)})
    assert done.returncode == 1
    assert f"PYTHON={broken} cannot build wheels" in done.stderr
    assert "setuptools>=70.1" in done.stderr
    assert "building" not in done.stderr
