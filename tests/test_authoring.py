"""docs/authoring.md's code is examples/trinity-plugin-example's, and that out-of-tree distribution builds
as a wheel, installs, and passes the conformance kit and its golden-value tests."""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "trinity-plugin-example"
BLOCK = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.S)


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


def test_every_code_block_of_the_guide_is_a_file_of_the_example() -> None:
    blocks = BLOCK.findall((ROOT / "docs" / "authoring.md").read_text(encoding="utf-8"))
    files = {path for path, _ in blocks}
    assert {"trinity_plugin_example/loss.py", "trinity_plugin_example/advantage.py"} <= files
    assert {"trinity_plugin_example/trainer_advantage.py", "trinity_plugin_example/preset.py"} <= files
    assert "trinity_plugin_example/reward.py" in files
    for path, code in blocks:
        assert code == (EXAMPLE / path).read_text(encoding="utf-8"), f"docs/authoring.md's {path} differs"


@pytest.mark.skipif(
    not (_installed("trinity-plugin-kl") and _installed("trinity-plugin-entropy")),
    reason="the example's preset names the kl and entropy plugins' components",
)
@pytest.mark.skipif(
    _installed("trinity-plugin-example"), reason="installed here already: the build is tested"
)
def test_the_example_builds_installs_and_passes_the_kit(tmp_path: Path) -> None:
    wheels, site = tmp_path / "dist", tmp_path / "site"
    env = {**os.environ, "WHEELHOUSE": str(wheels), "PYTHON": sys.executable}
    build = [str(ROOT / "scripts" / "build_wheels.sh"), str(EXAMPLE)]
    subprocess.run(["bash", *build], cwd=ROOT, env=env, check=True, capture_output=True)
    [wheel] = wheels.glob("trinity_plugin_example-*.whl")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site)]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True)
    child = {**os.environ, "PYTHONPATH": str(site), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    child.pop("TRINITY_DISABLE_PLUGINS", None)
    cmd = [sys.executable, "-m", "pytest", str(EXAMPLE / "tests"), "-p", "trinity_core.testing.plugin", "-q"]
    run = subprocess.run(
        [*cmd, "-p", "no:cacheprovider"], cwd=tmp_path, env=child, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "failed" not in run.stdout
    assert (
        str(site)
        in subprocess.run(
            [sys.executable, "-c", "import trinity_plugin_example as m; print(m.__file__)"],
            cwd=tmp_path,
            env=child,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )  # the installed wheel, not the example's sources
