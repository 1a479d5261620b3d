"""Rewrite the plugin environments of tox.ini from plugins/*/pyproject.toml.

Each folder ``plugins/trinity-plugin-<name>`` gets the factor ``<name>`` without hyphens in
``[testenv:plugin-{...}]``, installing the plugin and every plugin distribution it needs (its declared
``trinity-plugin-*`` dependencies, transitively); ``[testenv:all]`` installs them all and runs each
plugin's tests in its own pytest session (plugins may hold same-named test modules). Run it after adding
a plugin; tests/test_matrix.py fails until tox.ini matches.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "trinity-plugin-"


def plugins(tracked_only: bool = False) -> list[Path]:
    """Plugin distribution folders, sorted by name (with ``tracked_only``: those git tracks)."""
    found = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
    if not tracked_only:
        return found
    listed = subprocess.run(
        ["git", "ls-files", "plugins/*/pyproject.toml"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    tracked = {Path(line).parent.name for line in listed}
    return [p for p in found if p.name in tracked]


def factor(plugin: str) -> str:
    """Tox factor of a plugin folder name: ``trinity-plugin-clip-filters`` -> ``clipfilters``."""
    return plugin.removeprefix(PREFIX).replace("-", "")


def declared(plugin: str) -> set[str]:
    """Plugin distributions named in ``plugin``'s dependencies."""
    project = tomllib.loads((ROOT / "plugins" / plugin / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0] for dep in project.get("dependencies", [])}
    return {name for name in names if name.startswith(PREFIX)}


def closure(plugin: str) -> list[str]:
    """``plugin`` first, then every plugin distribution it needs, sorted."""
    needed: set[str] = set()
    todo = [plugin]
    while todo:
        current = todo.pop()
        if current not in needed:
            needed.add(current)
            todo.extend(declared(current))
    return [plugin, *sorted(needed - {plugin})]


def render(tracked_only: bool = False) -> tuple[str, str]:
    """The plugin env section and the all env section."""
    names = [p.name for p in plugins(tracked_only)]
    factors = ",".join(factor(n) for n in names)
    deps = [f"    {factor(n)}: {{toxinidir}}/plugins/{dep}" for n in names for dep in closure(n)]
    commands = [f"    {factor(n)}: pytest {{toxinidir}}/plugins/{n}/tests {{posargs}}" for n in names]
    plugin_env = "\n".join(
        [
            f"[testenv:plugin-{{{factors}}}]",
            "description = one plugin alone on the core, with only the plugin distributions it needs",
            "deps =",
            "    -c {toxinidir}/constraints.txt",
            "    -e {toxinidir}[test]",
            *deps,
            "commands =",
            *commands,
        ]
    )
    all_env = "\n".join(
        [
            "[testenv:all]",
            "description = the core and every plugin installed together: every test suite",
            "deps =",
            "    -c {toxinidir}/constraints.txt",
            "    -e {toxinidir}[test]",
            *[f"    {{toxinidir}}/plugins/{n}" for n in names],
            "commands =",
            "    trinity plugins list --strict",
            "    trinity info --self-check",
            "    pytest {toxinidir}/tests --ignore={toxinidir}/tests/train {posargs}",
            *[f"    pytest {{toxinidir}}/plugins/{n}/tests {{posargs}}" for n in names],
        ]
    )
    return plugin_env, all_env


def main() -> None:
    """Replace the two sections in tox.ini and the plugin factor list of env_list.

    ``--tracked`` renders only the plugins git tracks (to commit a subset of a working tree).
    """
    tracked_only = "--tracked" in sys.argv[1:]
    path = ROOT / "tox.ini"
    text = path.read_text()
    plugin_env, all_env = render(tracked_only)
    text = re.sub(r"\[testenv:plugin-\{[^}]*\}\].*?(?=\n\[)", plugin_env + "\n", text, flags=re.S)
    text = re.sub(r"\[testenv:all\].*?(?=\n\[)", all_env + "\n", text, flags=re.S)
    factors = ",".join(factor(p.name) for p in plugins(tracked_only))
    text = re.sub(r"plugin-\{[^}]*\}, all", f"plugin-{{{factors}}}, all", text)
    path.write_text(text)


if __name__ == "__main__":
    main()
