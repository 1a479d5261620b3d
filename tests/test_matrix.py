"""The tox matrix covers every plugin distribution under plugins/, each with exactly what it needs.

tox.ini's plugin environments are rendered by scripts/sync_tox.py from the plugins' pyproject files;
this test fails when a plugin was added or its dependencies changed without re-running it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import sync_tox  # noqa: E402

PLUGINS = sync_tox.plugins()


def test_tox_ini_is_in_sync_with_the_plugins() -> None:
    plugin_env, all_env = sync_tox.render()
    text = (ROOT / "tox.ini").read_text()
    assert plugin_env in text, "tox.ini's plugin envs are stale: run `python scripts/sync_tox.py`"
    assert all_env in text, "tox.ini's all env is stale: run `python scripts/sync_tox.py`"
    stale = "tox.ini's core-slim env is stale: run `python scripts/sync_tox.py`"
    assert sync_tox.render_slim() in text, stale
    factors = ",".join(sync_tox.factor(p.name) for p in PLUGINS)
    assert f"plugin-{{{factors}}}, all" in text
    assert "env_list = core, core-slim," in text


def test_core_slim_installs_the_core_without_extras() -> None:
    slim = sync_tox.render_slim()
    assert "    {toxinidir}\n" in slim  # the core, not editable, no [extras]
    assert "[" not in slim.split("deps =", 1)[1].split("commands =", 1)[0]
    assert f"--trinity-plugin={sync_tox.SLIM_PLUGIN}" in slim


def test_envs_install_the_extras_their_tests_import(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sync_tox.extras("trinity-plugin-sapo") == ["test"]
    monkeypatch.setattr(sync_tox, "extras", lambda n: ["test", "train"] if n.endswith("-rec") else ["test"])
    plugin_env, all_env = sync_tox.render()
    assert "    !rec: -e {toxinidir}[test]\n" in plugin_env
    assert "    rec: -e {toxinidir}[test,train]\n" in plugin_env
    assert "    -e {toxinidir}[test,hf,train]\n" in all_env


def test_dependency_closure_is_transitive() -> None:
    needed = set(sync_tox.closure("trinity-plugin-sapo"))
    assert {"trinity-plugin-sapo", "trinity-plugin-grpo", "trinity-plugin-kl"} <= needed
    for name in needed - {"trinity-plugin-sapo"}:
        assert set(sync_tox.closure(name)) <= needed


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_has_readme_tests_and_conformance(plugin: Path) -> None:
    assert (plugin / "README.md").is_file()
    conformance = (plugin / "tests" / "test_conformance.py").read_text()
    assert f'distribution = "{plugin.name}"' in conformance


def test_each_plugin_suite_runs_once_in_its_env_with_its_test_extra() -> None:
    plugin_env, all_env = sync_tox.render()
    # gym's tests train the multistep and gigpo presets (its test extra): its env installs them, so
    # they run there, and the all env runs no plugin suite again.
    assert "    gym: {toxinidir}/plugins/trinity-plugin-multistep\n" in plugin_env
    assert "    gym: {toxinidir}/plugins/trinity-plugin-gigpo\n" in plugin_env
    assert "    reasoninggym: {toxinidir}/plugins/trinity-plugin-grpo\n" in plugin_env
    for plugin in PLUGINS:
        run = f"    {sync_tox.factor(plugin.name)}: pytest {{toxinidir}}/plugins/{plugin.name}/tests"
        assert run in plugin_env
        assert f"/plugins/{plugin.name}/tests" not in all_env
    assert sync_tox.closure("trinity-plugin-gym") == ["trinity-plugin-gym"]  # runtime deps only
