"""A kill stand-in for resume tests: a metrics observer that raises after a chosen step."""

from __future__ import annotations

from trinity_core.hookspecs import hookimpl


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
