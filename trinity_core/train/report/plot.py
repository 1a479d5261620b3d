"""PNG plot of a run from ``metrics.jsonl`` (matplotlib: ``trinity-core[plot]``): reward, response length
and entropy per step, titled with the run and its algorithm."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PANELS", "plot_figure", "plot_run"]

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mean reward", ("reward/mean",)),
    ("response length", ("response/length",)),
    ("entropy", ("actor/entropy", "actor/entropy_loss")),
)
"""``(y label, metric keys in order of preference)`` of the panels, top to bottom."""


def _series(rows: Sequence[Mapping[str, float]], keys: Sequence[str]) -> list[float]:
    """The first of ``keys`` that any row logged, per row (NaN, a gap, where a row lacks it)."""
    key = next((k for k in keys if any(k in r for r in rows)), keys[0])
    return [r.get(key, float("nan")) for r in rows]


def plot_figure(rows: Sequence[Mapping[str, float]], title: str) -> Any:
    """A matplotlib figure with one panel per :data:`PANELS` entry over ``rows``' steps, titled ``title``."""
    plt: Any = importlib.import_module("matplotlib.pyplot")
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(7, 6.5), sharex=True)
    for ax, (label, keys), color in zip(axes, PANELS, ("tab:blue", "tab:green", "tab:purple"), strict=True):
        ax.plot(steps, _series(rows, keys), lw=1, color=color)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_run(metrics_path: Path, out: Path, title: str = "") -> str | None:
    """Draw the run's panels into ``out``; a note (also ``out`` as ``.txt``) if matplotlib is missing."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        note = "plot skipped: matplotlib is not installed (pip install 'trinity-core[plot]')"
        out.with_suffix(".txt").write_text(note + "\n", encoding="utf-8")
        return note
    matplotlib.use("Agg")
    rows = [
        json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    fig = plot_figure(rows, title or metrics_path.parent.name)
    fig.savefig(out, dpi=80)
    importlib.import_module("matplotlib.pyplot").close(fig)
    return None
