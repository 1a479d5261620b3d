"""``trinity plugins new NAME --kind KIND``: write a pip-installable plugin distribution that passes the kit.

The scaffold holds a pyproject with the entry point, one module with the component (its ``Args`` and a
formula docstring to fill in), a README, a tox.ini and tests that run the conformance kit.
"""

from __future__ import annotations

import argparse
import keyword
import re
from pathlib import Path
from string import Template

from trinity_core.cli.scaffold_templates import COMPONENTS, FILES, KIND_TESTS, MULTI_TURN_WORKFLOW
from trinity_core.registry import PLUGIN_API_VERSION, get_kind

__all__ = ["ScaffoldError", "cmd_new", "register_new", "scaffold_kinds", "write_scaffold"]

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
EXTRA_DEPS = {"algorithm": ', "trinity-plugin-grpo>=0.1,<0.2"'}
"""Distributions a scaffold's defaults name components of (the preset's grpo, ppo, kl and entropy)."""


class ScaffoldError(ValueError):
    """The scaffold cannot be written as asked (bad name, unknown kind, existing directory)."""


def scaffold_kinds() -> list[str]:
    """Kinds ``trinity plugins new`` can write."""
    return list(COMPONENTS)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def write_scaffold(name: str, kind: str, directory: Path, *, multi_turn: bool = False) -> Path:
    """Write distribution ``trinity-plugin-<name>`` providing ``kind`` ``name`` under ``directory``
    (with ``multi_turn``, a workflow that plays several turns per episode).

    Returns:
        the distribution's folder.

    Raises:
        ScaffoldError: the name is not a lowercase identifier, the kind has no template, the folder
            exists already, or ``multi_turn`` is asked for another kind than workflow.
    """
    if not NAME.match(name) or keyword.iskeyword(name):
        raise ScaffoldError(
            f"plugin name {name!r} must be a lowercase Python identifier (letters, digits, _), e.g. my_loss"
        )
    if kind not in COMPONENTS:
        raise ScaffoldError(f"no scaffold for kind {kind!r}; kinds with one: {', '.join(COMPONENTS)}")
    if multi_turn and kind != "workflow":
        raise ScaffoldError(f"--multi-turn is a variant of the workflow scaffold, not of kind {kind!r}")
    spec = get_kind(kind)
    dist = f"trinity-plugin-{name.replace('_', '-')}"
    root = directory / dist
    if root.exists():
        raise ScaffoldError(f"{root} exists already; choose another name or --dir, or remove it")
    suffix, source = MULTI_TURN_WORKFLOW if multi_turn else COMPONENTS[kind]
    cls = f"{_camel(name)}{suffix}" if suffix else ""
    values = {
        "name": name,
        "cls": cls,
        "pkg": f"trinity_plugin_{name}",
        "dist": dist,
        "module": kind,
        "group": spec.namespace,
        "title": spec.title,
        "target": cls or name,
        "api": PLUGIN_API_VERSION,
        "extra_deps": EXTRA_DEPS.get(kind, ""),
    }
    files = dict(FILES)
    files[f"$pkg/{kind}.py"] = source
    if kind in KIND_TESTS:
        files[f"tests/test_{kind}.py"] = KIND_TESTS[kind]
    for path_template, text in files.items():
        path = root / Template(path_template).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).substitute(values), encoding="utf-8")
    return root


def register_new(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plugins new``."""
    new = sub.add_parser(
        "new",
        help="write a new plugin distribution (pyproject, component, README, tests, tox.ini)",
        description="Write trinity-plugin-NAME/: pip install it, and its tests run the conformance kit.",
    )
    new.add_argument("name", help="component name (lowercase identifier), e.g. my_loss")
    new.add_argument("--kind", required=True, choices=scaffold_kinds(), help="component kind")
    new.add_argument("--dir", default=".", help="where to create the distribution folder (default: .)")
    new.add_argument(
        "--multi-turn",
        action="store_true",
        help="--kind workflow: a multi-turn episode (answer, feedback, answer again) kept by Conversation, "
        "one experience per episode or per turn",
    )
    new.set_defaults(func=cmd_new)


def cmd_new(ns: argparse.Namespace) -> int:
    """Write the scaffold; print where and what to do next (exit 1 with one line on a bad request)."""
    import sys

    try:
        root = write_scaffold(ns.name, ns.kind, Path(ns.dir), multi_turn=ns.multi_turn)
    except ScaffoldError as exc:
        print(f"trinity plugins new: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {root}\nnext: pip install -e '{root}[test]' && pytest {root}")
    return 0
