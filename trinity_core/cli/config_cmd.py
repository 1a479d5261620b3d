"""``trinity config validate [FILE]``: resolve a run configuration and print it, or print its problems."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

__all__ = ["cmd_validate", "format_explain", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``config`` command group."""
    parser = subparsers.add_parser("config", help="check run configurations")
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    validate = sub.add_parser(
        "validate",
        help="resolve a YAML config (default: the embedded one): print it, or its problems",
        description="Resolve a run configuration as `trinity train` would: print it, or every problem.",
    )
    validate.add_argument("file", nargs="?", help="YAML run configuration (default: the embedded default)")
    validate.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a value as `trinity train --set` does (repeatable)",
    )
    validate.add_argument("--json", action="store_true", help="print the resolved config as JSON")
    validate.add_argument(
        "--explain",
        "--sources",
        dest="explain",
        action="store_true",
        help="also print where each resolved value came from (preset, embedded default, config file, --set)",
    )
    validate.set_defaults(func=cmd_validate)


def format_explain(resolved: Any) -> list[str]:
    """One line per resolved value: ``path = value  (origin)``, algorithm first, in config order."""
    data = resolved.model_dump(mode="json")
    lines = []
    for path, source in resolved.sources.items():
        node: Any = data
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        lines.append(f"{path} = {json.dumps(node)}  ({source})")
    return lines


def cmd_validate(ns: argparse.Namespace) -> int:
    """Exit 0 printing the resolved config, or 1 printing every problem (one line when there is one)."""
    from trinity_core.config import ConfigError, resolve_config
    from trinity_core.config.capabilities import check_capabilities

    embedded = None
    if ns.file is None:
        embedded = importlib.import_module("trinity_core.train.run").DEFAULT_CONFIG
    try:
        resolved = resolve_config(ns.file, overrides=ns.overrides, embedded=embedded)
        check_capabilities(resolved)  # a run that cannot provide a critic, teacher, ... is invalid here too
    except ConfigError as exc:
        print(f"trinity: invalid config: {exc.summary()}", file=sys.stderr)
        return 1
    data = resolved.model_dump(mode="json")
    if ns.json:
        if ns.explain:
            data["sources"] = resolved.sources
        print(json.dumps(data, indent=2))
    else:
        yaml: Any = importlib.import_module("yaml")
        print(yaml.safe_dump(data, sort_keys=False).rstrip())
        if ns.explain:
            print("# where each value came from")
            print("\n".join(f"#   {line}" for line in format_explain(resolved)))
    return 0
