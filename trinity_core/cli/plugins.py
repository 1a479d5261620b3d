"""``trinity plugins list`` and ``trinity plugins show``: what is installed, what failed, what conflicts,
and (``--wide``, ``--json``) the shipped plugins that are not installed, with their install line."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import inspect
import json
import sys
import typing
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from trinity_core.registry import (
    ComponentRecord,
    PluginError,
    UnknownComponentError,
    get_kind,
    get_registry,
    kinds,
    strict_mode,
)
from trinity_core.registry.shipped import SHIPPED, install_line

__all__ = ["WIDTH", "args_table", "not_installed", "register"]

WIDTH = 100
"""Columns the default ``plugins list`` table fits in (``--wide`` and ``--json`` give everything)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``plugins`` command group."""
    parser = subparsers.add_parser("plugins", help="list and inspect installed plugins")
    sub = parser.add_subparsers(dest="plugins_command", metavar="SUBCOMMAND", required=True)
    kind_names = [k.kind for k in kinds()]

    listing = sub.add_parser("list", help="list components, failed plugins and conflicts")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument(
        "--wide",
        action="store_true",
        help=f"full summaries, paper links and the shipped plugins not installed, with their install line "
        f"(default: fit {WIDTH} columns)",
    )
    listing.add_argument("--kind", choices=kind_names, help="only this kind")
    listing.add_argument("--strict", action="store_true", help="exit 1 on any load failure or conflict")
    listing.set_defaults(func=cmd_list)

    show = sub.add_parser("show", help="show a component's arguments")
    show.add_argument("name", help="registered component name")
    show.add_argument("--kind", choices=kind_names, help="only this kind")
    show.set_defaults(func=cmd_show)

    from trinity_core.cli.scaffold import register_new

    register_new(sub)


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _short(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cmd_list(ns: argparse.Namespace) -> int:
    """Print every component (table or JSON); exit 1 in strict mode when anything failed or conflicts."""
    from trinity_core.hooks import TrinityPluginManager, registered_plugins

    registry = get_registry()
    records = registry.list_components(ns.kind, strict=False)
    conflicts = registry.conflicts(ns.kind)
    disabled = [
        ep for ep in registry.disabled() if ns.kind is None or ep.group == get_kind(ns.kind).namespace
    ]
    pm = TrinityPluginManager()
    if ns.kind is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # failures are listed below
            pm.load_entry_points(strict=False)
    hooks = [(n, o) for n, o in registered_plugins(pm)]
    failures = [r.error for r in records if r.error is not None] + pm.failures
    missing = not_installed(ns.kind)
    if ns.json:
        payload = {
            "components": [_record_json(r) for r in records if r.error is None],
            "hooks": [{"name": n, **(asdict(o) if o else {})} for n, o in hooks],
            "failures": [asdict(f) for f in failures],
            "conflicts": [
                {"kind": c.kind, "name": c.name, "providers": [asdict(p) for p in c.providers]}
                for c in conflicts
            ],
            "disabled": [asdict(ep) for ep in disabled],
            "not_installed": [
                {"distribution": dist, "provides": provides, "install": install_line(dist)}
                for dist, provides in missing.items()
            ],
        }
        print(json.dumps(payload, indent=2))
    else:
        print(_listing(records, hooks, ns.wide))
        if failures:
            print("\nfailed to load:")
            for f in failures:
                print(f"  {f.kind} {f.describe()}")
        if conflicts:
            print("\nconflicts:")
            for c in conflicts:
                print(f"  {c.describe()}")
        if disabled:
            print("\ndisabled by TRINITY_DISABLE_PLUGINS:")
            for ep in disabled:
                print(f"  {ep.group} {ep.name!r} ({ep.provider})")
        if missing and ns.wide:
            print("\nshipped with trinity-core, not installed:")
            for dist, provides in missing.items():
                print(f"  {dist}: {', '.join(provides)}\n    install: {install_line(dist)}")
        elif missing:
            count = len(missing)
            print(f"\n{count} shipped plugin(s) not installed: `trinity plugins list --wide` lists them")
    strict = ns.strict or strict_mode()
    if strict and (failures or conflicts):
        print(
            f"trinity: strict mode: {len(failures)} failed plugin(s), {len(conflicts)} conflict(s)",
            file=sys.stderr,
        )
        return 1
    return 0


def not_installed(kind: str | None = None) -> dict[str, list[str]]:
    """Shipped plugin distributions (the catalog :data:`~trinity_core.registry.shipped.SHIPPED`) that are
    not installed, each with what it provides (``"policy_loss sapo"``; only ``kind`` when given)."""
    namespaces = {spec.namespace: spec.kind for spec in kinds()}
    wanted = get_kind(kind).namespace if kind else None
    out: dict[str, list[str]] = {}
    for namespace, names in SHIPPED.items():
        if wanted is not None and namespace != wanted:
            continue
        for name, dist in names.items():
            out.setdefault(dist, []).append(f"{namespaces.get(namespace, namespace)} {name}")
    return {dist: sorted(provides) for dist, provides in sorted(out.items()) if not _installed(dist)}


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


def _listing(records: Sequence[ComponentRecord], hooks: Sequence[tuple[str, Any]], wide: bool) -> str:
    """The table of loaded components and hook modules; without ``wide``, within :data:`WIDTH` columns."""
    rows = [
        [r.kind, r.name, r.entry_point.provider, r.summary, r.paper or ""] for r in records if r.error is None
    ]
    rows += [["hooks", n, o.provider if o else "", o.value if o else "", ""] for n, o in hooks]
    if not rows:
        return "no plugins installed"
    header = ["KIND", "NAME", "DISTRIBUTION", "SUMMARY", "PAPER"]
    if wide:
        return _table(rows, header)
    rows = [[row[0], row[1], row[2].split(" ")[0], row[3]] for row in rows]  # no version: it fits
    used = sum(max(len(r[i]) for r in [header, *rows]) + 2 for i in range(3))
    room = max(WIDTH - used, 12)
    return _table([[*row[:3], _short(row[3], room)] for row in rows], header[:4])


def _record_json(r: ComponentRecord) -> dict[str, Any]:
    return {
        "kind": r.kind,
        "name": r.name,
        "value": r.value,
        "distribution": r.distribution,
        "version": r.version,
        "summary": r.summary,
        "paper": r.paper,
    }


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    text = str(annotation).replace("typing.", "")
    return text


def _constraint(field: FieldInfo) -> str:
    parts: list[str] = []
    symbols = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "min_length": "len >=", "max_length": "len <="}
    for meta in field.metadata:
        for attr, symbol in symbols.items():
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{symbol} {value}")
        pattern = getattr(meta, "pattern", None)
        if pattern is not None:
            parts.append(f"matches {pattern}")
    if typing.get_origin(field.annotation) is typing.Literal:
        parts.append("one of " + ", ".join(repr(a) for a in typing.get_args(field.annotation)))
    return ", ".join(parts)


def args_table(model: type[BaseModel]) -> list[dict[str, str]]:
    """One row per field of an ``Args`` model: name, type, default, constraint, description."""
    rows = []
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        rows.append(
            {
                "name": name,
                "type": _type_name(field.annotation),
                "default": "(required)" if field.is_required() else repr(default),
                "constraint": _constraint(field),
                "description": field.description or "",
            }
        )
    return rows


def _preset_lines(obj: Any) -> list[str]:
    """Flags, default components and configuration rules of an algorithm preset (else no lines)."""
    from trinity_core.components import AlgorithmType
    from trinity_core.components.algorithm import ALGORITHM_FLAGS

    if not (isinstance(obj, type) and issubclass(obj, AlgorithmType)):
        return []
    lines = ["  flags:"]
    lines += [f"    {flag} = {getattr(obj, flag)!r}" for flag in ALGORITHM_FLAGS]
    config = obj.default_config()
    lines.append("  defaults:" if config else "  defaults: (none)")
    lines += [f"    {key} = {value!r}" for key, value in config.items()]
    rules = getattr(obj, "config_rules", ())
    if rules:
        lines.append("  config rules:")
        for rule in rules:
            doc = (inspect.getdoc(rule) or "").strip().splitlines()
            lines.append(f"    {getattr(rule, '__name__', repr(rule))}" + (f": {doc[0]}" if doc else ""))
    return lines


def cmd_show(ns: argparse.Namespace) -> int:
    """Print each component named ``ns.name`` (in every kind, or ``ns.kind``) with its arguments; for an
    algorithm preset its flags, default components and configuration rules."""
    registry = get_registry()
    specs = [get_kind(ns.kind)] if ns.kind else kinds()
    found = 0
    for spec in specs:
        if ns.name not in registry.names(spec.kind):
            continue
        found += 1
        try:
            record = registry.record(spec.kind, ns.name)
        except PluginError as exc:
            print(f"{spec.kind} {ns.name!r}: {exc}\n")
            if getattr(ns, "global_debug", False) and getattr(exc, "traceback", ""):
                print(f"the plugin's traceback:\n{exc.traceback}")  # type: ignore[attr-defined]
            continue
        print(f"{spec.kind} {record.name!r} from {record.entry_point.provider} ({record.value})")
        if record.summary:
            print(f"  {record.summary}")
        if record.paper:
            print(f"  paper: {record.paper}")
        model = getattr(record.obj, "Args", None)
        preset = _preset_lines(record.obj)
        if preset:
            print("\n".join(preset))
        elif isinstance(model, type) and issubclass(model, BaseModel) and model.model_fields:
            rows = [tuple(row.values()) for row in args_table(model)]
            print(_table(rows, ("ARG", "TYPE", "DEFAULT", "CONSTRAINT", "DESCRIPTION")))
        else:
            print("  (no arguments)")
        print()
    if not found:
        if ns.kind:
            registry.record(ns.kind, ns.name)  # raises UnknownComponentError with suggestions
        raise UnknownComponentError(
            f"no component named {ns.name!r} in any kind; run `trinity plugins list` to see what is installed"
        )
    return 0
