"""PNG plot of reward and loss per step from ``metrics.jsonl`` (matplotlib: ``trinity-core[plot]``)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

__all__ = ["plot_run"]


def plot_run(metrics_path: Path, out: Path) -> str | None:
    """Draw reward (gaps where not logged) and loss per step into ``out``; a note if matplotlib is missing."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        note = "plot skipped: matplotlib is not installed (pip install 'trinity-core[plot]')"
        out.with_suffix(".txt").write_text(note + "\n", encoding="utf-8")
        return note
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    rows = [
        json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    ax1.plot(steps, [r.get("reward/mean", float("nan")) for r in rows], lw=1)
    ax1.set_ylabel("mean reward")
    ax1.grid(alpha=0.3)
    ax2.plot(steps, [r.get("actor/loss", float("nan")) for r in rows], lw=1, color="tab:red")
    ax2.set_ylabel("loss")
    ax2.set_xlabel("step")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return None
