"""``trinity config validate FILE``: resolve a run configuration and print it, or print its problems."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

__all__ = ["cmd_validate", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``config`` command group."""
    parser = subparsers.add_parser("config", help="check run configurations")
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    validate = sub.add_parser("validate", help="resolve a YAML config: print it, or its problems")
    validate.add_argument("file", help="YAML run configuration")
    validate.add_argument("--json", action="store_true", help="print the resolved config as JSON")
    validate.add_argument(
        "--sources", action="store_true", help="also print where each algorithm value came from"
    )
    validate.set_defaults(func=cmd_validate)


def cmd_validate(ns: argparse.Namespace) -> int:
    """Exit 0 printing the resolved config, or 1 printing every problem."""
    from trinity_core.config import ConfigError, resolve_config
    from trinity_core.config.capabilities import check_capabilities

    try:
        resolved = resolve_config(ns.file)
        check_capabilities(resolved)  # a run that cannot provide a critic, teacher, ... is invalid here too
    except ConfigError as exc:
        print(f"trinity: invalid config: {exc}", file=sys.stderr)
        return 1
    data = resolved.model_dump(mode="json")
    if ns.json:
        if ns.sources:
            data["sources"] = resolved.sources
        print(json.dumps(data, indent=2))
    else:
        yaml: Any = importlib.import_module("yaml")
        print(yaml.safe_dump(data, sort_keys=False).rstrip())
        if ns.sources:
            print("# sources")
            for path, source in sorted(resolved.sources.items()):
                print(f"#   {path}: {source}")
    return 0
