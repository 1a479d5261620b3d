"""Rewrite the plugin environments of tox.ini from plugins/*/pyproject.toml.

Each folder ``plugins/trinity-plugin-<name>`` gets the factor ``<name>`` without hyphens in
``[testenv:plugin-{...}]``, installing the plugin and every plugin distribution it needs (its declared
``trinity-plugin-*`` dependencies, transitively) on the core with the ``test`` extra, plus the ``train``
or ``hf`` extra when the plugin's code or tests import what those provide; ``[testenv:all]`` installs them
all and runs the core's tests (each plugin's tests run once, in its plugin env, with the plugins its
``test`` extra names);
``[testenv:core-slim]`` installs the core without extras and :data:`SLIM_PLUGIN` with what it needs, and
runs the conformance kit on it. It also rewrites the shipped-plugin catalog of
trinity_core/registry/shipped.py and the plugin lines of requirements/all.txt. Run it after adding a
plugin; tests/test_matrix.py fails until tox.ini matches.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "trinity-plugin-"
SLIM_PLUGIN = "trinity-plugin-sapo"
"""The loss plugin the core-slim environment installs on the core without extras."""
EXTRA_MODULES = {
    "train": (
        "transformers",
        "accelerate",
        "tokenizers",
        "tqdm",
        "trinity_core.train.run",
        "trinity_core.train.models.policy",
        "trinity_core.workflows",
    ),
    "hf": ("datasets", "trinity_core.hf"),
}
"""Modules whose import in a plugin's code or tests means its env needs that extra of trinity-core."""
CORE_EXTRAS = ("test", "hf")
"""Extras the core's own tests need (tests/test_hf.py reads and writes ``datasets``)."""


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


def declared(plugin: str, extra: str | None = None) -> set[str]:
    """Plugin distributions named in ``plugin``'s dependencies (with ``extra``: in that extra's)."""
    project = tomllib.loads((ROOT / "plugins" / plugin / "pyproject.toml").read_text())["project"]
    if extra is None:
        deps = project.get("dependencies", [])
    else:
        deps = project.get("optional-dependencies", {}).get(extra, [])
    names = {re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0] for dep in deps}
    return {name for name in names if name.startswith(PREFIX)}


def closure(plugin: str, with_tests: bool = False) -> list[str]:
    """``plugin`` first, then every plugin distribution it needs, sorted; ``with_tests`` adds those its
    ``test`` extra names (and what they need), so that its tests run in its env, skipping nothing."""
    needed: set[str] = set()
    todo = [plugin, *(declared(plugin, "test") if with_tests else ())]
    while todo:
        current = todo.pop()
        if current not in needed:
            needed.add(current)
            todo.extend(declared(current))
    return [plugin, *sorted(needed - {plugin})]


def extras(plugin: str) -> list[str]:
    """Extras of trinity-core that ``plugin``'s code or tests import from: ``test`` and those found."""
    found = {"test"}
    for path in (ROOT / "plugins" / plugin).rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for extra, modules in EXTRA_MODULES.items():
            names = "|".join(re.escape(m) for m in modules)
            if re.search(rf"^\s*(?:import|from)\s+(?:{names})\b", text, flags=re.M):
                found.add(extra)
    return sorted(found, key=lambda e: (e != "test", e))


def core_install(extra_names: list[str] | tuple[str, ...]) -> str:
    """The deps line installing the core, editable, with ``extra_names``."""
    return f"    -e {{toxinidir}}[{','.join(extra_names)}]"


def render_slim() -> str:
    """The core-slim env section: the core without extras, one loss plugin, the conformance kit on it."""
    return "\n".join(
        [
            "[testenv:core-slim]",
            "description = the core installed without extras (what a plugin author installs), one loss",
            "    plugin with the plugin distributions it needs, and the conformance kit run on it",
            "deps =",
            "    -c {toxinidir}/constraints.txt",
            "    {toxinidir}",
            *[f"    {{toxinidir}}/plugins/{dep}" for dep in closure(SLIM_PLUGIN)],
            "    pytest>=8",
            "changedir = {envtmpdir}",
            "commands =",
            "    python {toxinidir}/scripts/check_slim.py",
            "    trinity plugins list --strict",
            f"    pytest -p no:cacheprovider --trinity-plugin={SLIM_PLUGIN} {{posargs}}",
        ]
    )


def render(tracked_only: bool = False) -> tuple[str, str]:
    """The plugin env section and the all env section."""
    names = [p.name for p in plugins(tracked_only)]
    factors = ",".join(factor(n) for n in names)
    more = [n for n in names if extras(n) != ["test"]]
    installs = [f"    {factor(n)}: {core_install(extras(n)).strip()}" for n in more]
    deps = [f"    {factor(n)}: {{toxinidir}}/plugins/{dep}" for n in names for dep in closure(n, True)]
    every = sorted({*CORE_EXTRAS, *(e for n in names for e in extras(n))}, key=lambda e: (e != "test", e))
    commands = [f"    {factor(n)}: pytest {{toxinidir}}/plugins/{n}/tests {{posargs}}" for n in names]
    plugin_env = "\n".join(
        [
            f"[testenv:plugin-{{{factors}}}]",
            "description = one plugin alone on the core, with only the plugin distributions it needs",
            "deps =",
            "    -c {toxinidir}/constraints.txt",
            # "!a-!b:" means neither a nor b in tox: those plugins install the core with more extras.
            "    " + "-".join(f"!{factor(n)}" for n in more) + ": -e {toxinidir}[test]"
            if more
            else core_install(["test"]),
            *installs,
            *deps,
            "commands =",
            *commands,
        ]
    )
    all_env = "\n".join(
        [
            "[testenv:all]",
            "description = the core and every plugin installed together: the core's tests (those that",
            "    need every plugin run here only; those marked core_alone run in core only); each",
            "    plugin's tests run once, in its plugin env",
            "deps =",
            "    -c {toxinidir}/constraints.txt",
            core_install(every),
            *[f"    {{toxinidir}}/plugins/{n}" for n in names],
            "commands =",
            "    trinity plugins list --strict",
            "    trinity info --self-check",
            "    pytest {toxinidir}/tests --ignore={toxinidir}/tests/train"
            ' --ignore={toxinidir}/tests/integrations -m "not core_alone" {posargs}',
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
    slim = render_slim()
    if "[testenv:core-slim]" in text:
        text = re.sub(r"\[testenv:core-slim\].*?(?=\n\[)", slim + "\n", text, flags=re.S)
    else:
        text = text.replace("\n[testenv:lint]", f"\n{slim}\n\n[testenv:lint]")
    factors = ",".join(factor(p.name) for p in plugins(tracked_only))
    text = re.sub(r"plugin-\{[^}]*\}, all", f"plugin-{{{factors}}}, all", text)
    path.write_text(text)
    write_shipped(tracked_only)
    write_requirements_all(tracked_only)


def write_requirements_all(tracked_only: bool = False) -> None:
    """Rewrite the plugin lines of requirements/all.txt: every shipped plugin, editable."""
    path = ROOT / "requirements" / "all.txt"
    kept = [line for line in path.read_text().splitlines() if not line.startswith("-e plugins/")]
    kept += [f"-e plugins/{p.name}" for p in plugins(tracked_only)]
    path.write_text("\n".join(kept) + "\n")


def write_shipped(tracked_only: bool = False) -> None:
    """Rewrite ``SHIPPED`` in trinity_core/registry/shipped.py (an unknown name's install hint).

    The catalog is static so that an installed core, which has no plugins/ folder, can still say which
    shipped distribution provides a name.
    """
    from trinity_core.registry.shipped import catalog

    table = catalog(p / "pyproject.toml" for p in plugins(tracked_only))
    lines = ["SHIPPED: dict[str, dict[str, str]] = {"]
    for group, names in table.items():
        lines.append(f'    "{group}": {{')
        lines += [f'        "{name}": "{dist}",' for name, dist in names.items()]
        lines.append("    },")
    lines.append("}")
    path = ROOT / "trinity_core" / "registry" / "shipped.py"
    text = path.read_text()
    text = re.sub(
        r"^SHIPPED: dict\[str, dict\[str, str\]\] = \{\n.*?^\}\n",
        "\n".join(lines) + "\n",
        text,
        flags=re.S | re.M,
    )
    path.write_text(text)


if __name__ == "__main__":
    main()
