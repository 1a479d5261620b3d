"""``trinity config validate [FILE | --config FILE]``: resolve a run configuration and print it, or print
its problems. The file is positional or, as for ``trinity train``, ``--config``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

__all__ = ["cmd_validate", "config_path", "format_explain", "register"]


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
        "--config",
        dest="config_file",
        metavar="FILE.yaml",
        help="the same as FILE, spelt as for `trinity train --config`",
    )
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


def config_path(ns: argparse.Namespace) -> str | None:
    """The config file of ``ns``: the positional FILE or ``--config`` (the same file given both ways is
    one); None when neither is given, or when two different files are."""
    given = {name for name in (ns.file, ns.config_file) if name is not None}
    return given.pop() if len(given) == 1 else None


def cmd_validate(ns: argparse.Namespace) -> int:
    """Exit 0 printing the resolved config, or 1 printing every problem (one line when there is one)."""
    from trinity_core.config import ConfigError, resolve_config
    from trinity_core.config.capabilities import check_capabilities

    path = config_path(ns)
    if path is None and ns.file is not None:
        print(
            f"trinity config validate: error: two config files, {ns.file!r} and --config "
            f"{ns.config_file!r}; give one (positional FILE or --config FILE)",
            file=sys.stderr,
        )
        return 2
    embedded = None
    if path is None:
        embedded = importlib.import_module("trinity_core.train.run").DEFAULT_CONFIG
    try:
        resolved = resolve_config(path, overrides=ns.overrides, embedded=embedded)
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
