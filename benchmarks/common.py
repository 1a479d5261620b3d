"""Shared helpers of the benchmark suite: timing, the reference implementation, table output."""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = Path(os.environ.get("TRINITY_REFERENCE_DIR", ROOT / ".ref"))
STUB_DIR = ROOT / "trinity_core" / "testing" / "_refstub"


def add_reference_to_path() -> None:
    """Make the reference trinity-rft 0.6.0 importable (see tests/reference.py), or exit with a hint."""
    if not (REF_DIR / "trinity" / "__init__.py").is_file():
        sys.exit(
            f"reference trinity-rft 0.6.0 not found in {REF_DIR}; install it with\n"
            f"  pip install --no-deps --target {REF_DIR} trinity-rft==0.6.0 omegaconf"
        )
    for path in (str(REF_DIR), str(STUB_DIR)):
        if path not in sys.path:
            sys.path.append(path)


def best_time(fn: Callable[[], Any], *, repeat: int = 5, min_time: float = 0.2) -> float:
    """Median wall time of one call of ``fn`` in seconds over ``repeat`` rounds.

    A round calls ``fn`` enough times to last ``min_time`` (at least once); garbage collection runs between
    rounds, not inside them, so both sides pay only for their own allocations.
    """
    fn()  # warm-up: imports, caches, allocator
    rounds = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            calls = 0
            start = time.perf_counter()
            while True:
                fn()
                calls += 1
                elapsed = time.perf_counter() - start
                if elapsed >= min_time:
                    break
        finally:
            gc.enable()
        rounds.append(elapsed / calls)
    return statistics.median(rounds)


@dataclass
class Row:
    """One line of a comparison table."""

    case: str
    operation: str
    reference_s: float
    ours_s: float
    target: float | None

    @property
    def speedup(self) -> float:
        """How many times faster ours is than the reference."""
        return self.reference_s / self.ours_s if self.ours_s > 0 else float("inf")

    @property
    def verdict(self) -> str:
        """``met``, ``MISSED`` or ``-`` when the row has no target."""
        if self.target is None:
            return "-"
        return "met" if self.speedup >= self.target else "MISSED"


def format_table(rows: list[Row]) -> str:
    """Render rows as a Markdown table."""
    lines = [
        "| case | operation | reference | ours | speedup | target | verdict |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        target = "-" if row.target is None else f">= {row.target:g}x"
        lines.append(
            f"| {row.case} | {row.operation} | {_fmt(row.reference_s)} | {_fmt(row.ours_s)} | "
            f"{row.speedup:.1f}x | {target} | {row.verdict} |"
        )
    return "\n".join(lines)


def _fmt(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def machine_line() -> str:
    """A one-line description of where the numbers were taken."""
    import platform

    import torch

    return (
        f"Python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPU cores, "
        f"{platform.machine()}, torch threads {torch.get_num_threads()}"
    )
