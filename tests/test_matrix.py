"""The tox matrix covers every plugin distribution under plugins/, each with exactly what it declares."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def _factor(plugin: Path) -> str:
    return plugin.name.removeprefix("trinity-plugin-")


def _declared_plugins(plugin: Path) -> set[str]:
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0] for dep in project.get("dependencies", [])}
    return {name for name in names if name.startswith("trinity-plugin-")}


def _env_deps(factor: str) -> set[str]:
    """Plugin folders installed in env ``plugin-<factor>`` (factor-conditional deps lines)."""
    deps = _tox()[f"testenv:plugin-{_factors()}"]
    installed = set()
    for line in deps["deps"].splitlines():
        match = re.fullmatch(r"\s*(\w+): \{toxinidir\}/plugins/(trinity-plugin-[\w-]+)\s*", line)
        if match and match.group(1) == factor:
            installed.add(match.group(2))
    return installed


def _factors() -> str:
    section = next(s for s in _tox().sections() if s.startswith("testenv:plugin-"))
    return section.removeprefix("testenv:plugin-")


def test_every_plugin_has_an_env() -> None:
    factors = set(_factors().strip("{}").split(","))
    assert factors == {_factor(p) for p in PLUGINS}
    env_list = _tox()["tox"]["env_list"]
    assert f"plugin-{_factors()}" in env_list


def _closure(name: str) -> set[str]:
    """``name`` and every plugin distribution it needs, directly or through another plugin."""
    needed, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current not in needed:
            needed.add(current)
            todo.extend(_declared_plugins(ROOT / "plugins" / current))
    return needed


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_env_installs_the_plugin_and_exactly_what_it_needs(plugin: Path) -> None:
    assert _env_deps(_factor(plugin)) == _closure(plugin.name)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_has_readme_tests_and_conformance(plugin: Path) -> None:
    assert (plugin / "README.md").is_file()
    conformance = (plugin / "tests" / "test_conformance.py").read_text()
    assert f'distribution = "{plugin.name}"' in conformance


def test_all_env_installs_every_plugin() -> None:
    deps = _tox()["testenv:all"]["deps"]
    for plugin in PLUGINS:
        assert f"{{toxinidir}}/plugins/{plugin.name}" in deps
        assert f"plugins/{plugin.name}/tests" in _tox()["testenv:all"]["commands"]
