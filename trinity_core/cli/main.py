"""Entry point of the ``trinity`` console script."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from trinity_core.cli import COMMAND_MODULES

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser, with every command group of :data:`COMMAND_MODULES` registered."""
    parser = argparse.ArgumentParser(
        prog="trinity", description="Reinforcement fine-tuning of language models."
    )
    parser.add_argument(
        "--debug",
        dest="global_debug",
        action="store_true",
        help="show tracebacks (a failing plugin's own, and the CLI's) instead of one-line errors",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _one_line(exc: Exception) -> str:
    """A configuration error with a single problem on one line; several problems stay a list."""
    from trinity_core.config import ConfigError

    return exc.summary() if isinstance(exc, ConfigError) else str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trinity`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    0: success; 1: the command failed (invalid config, plugin errors, strict-mode findings);
    2: bad usage.
    """
    from trinity_core.config import ConfigError
    from trinity_core.extras import MissingExtraError
    from trinity_core.registry import PluginError

    parser = build_parser()
    try:
        namespace = parser.parse_args(argv)
    except SystemExit as exc:  # --help or a usage error: report the status instead of exiting
        return exc.code if isinstance(exc.code, int) else 2
    func = getattr(namespace, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(namespace))
    except (PluginError, ConfigError, MissingExtraError) as exc:
        if getattr(namespace, "debug", False) or namespace.global_debug:
            plugin_tb = getattr(exc, "traceback", "")
            if plugin_tb:
                print(f"the plugin's traceback:\n{plugin_tb}", file=sys.stderr)
            raise
        print(f"trinity: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (e.g. `trinity plugins list | head`): stop quietly, as the docs of the
        # signal module recommend, instead of printing a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
