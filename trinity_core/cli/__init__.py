"""The ``trinity`` command: one module per command group, listed in :data:`COMMAND_MODULES`.

A command module exposes ``register(subparsers)``, which adds its sub-parser(s) and sets
``func=<callable(namespace) -> int>`` as the parser default. Adding ``trinity train`` means writing
``trinity_core/cli/train.py`` and appending its module name here.
"""

from __future__ import annotations

__all__ = ["COMMAND_MODULES"]

COMMAND_MODULES: tuple[str, ...] = (
    "trinity_core.cli.plugins",
    "trinity_core.cli.config_cmd",
    "trinity_core.cli.info",
    "trinity_core.cli.train",
    "trinity_core.cli.export",
    "trinity_core.cli.eval",
)
"""Modules whose ``register(subparsers)`` adds a command group, in help order."""
