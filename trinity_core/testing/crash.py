"""A kill stand-in for resume tests: a metrics observer that raises after a chosen step.

Register ``CrashAfter(k)`` with ``trinity_core.hooks.get_plugin_manager()``, expect the run to stop
(a ``HookCallError`` caused by :class:`Crash`), unregister it, resume from the run directory and compare
with an uninterrupted run: how the core's and plugins' tests check that a run resumes exactly.
"""

from __future__ import annotations

from trinity_core.hookspecs import hookimpl

__all__ = ["Crash", "CrashAfter"]


class Crash(RuntimeError):
    """Stands in for a kill."""


class CrashAfter:
    """Raises :class:`Crash` after step ``step``'s metrics (and its checkpoint, if any) are written."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def trinity_on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if step == self.step:
            raise Crash(f"killed after step {step}")
