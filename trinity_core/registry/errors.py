"""Errors of plugin discovery and component lookup; every message says what to do next."""

from __future__ import annotations

__all__ = [
    "ComponentArgsError",
    "PluginConflictError",
    "PluginContractError",
    "PluginError",
    "PluginLoadError",
    "UnknownComponentError",
]


class PluginError(Exception):
    """Base class of every registry error."""


class PluginLoadError(PluginError, ImportError):
    """A plugin failed to import, or loaded an object of the wrong type.

    Attributes:
        traceback: the plugin's formatted traceback (kept out of the message; ``--debug`` prints it).
    """

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


class PluginConflictError(PluginError):
    """Two distributions (or an installed plugin and an in-process registration) claim one name."""


class UnknownComponentError(PluginError, LookupError):
    """No component of that kind is registered under that name."""


class ComponentArgsError(PluginError, ValueError):
    """A component's arguments do not validate against its ``Args`` model.

    Attributes:
        problems: ``(key, message)`` pairs, one per bad argument (``key`` is dotted for nested values).
    """

    def __init__(self, message: str, problems: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.problems = problems


class PluginContractError(PluginError, RuntimeError):
    """A component broke its contract while a run used it (a task selector returned rows outside the
    task set, an experience operator returned rows that are not a subset of its input, ...). The message
    names the component, its distribution and what to do."""
