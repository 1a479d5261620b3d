"""Start-up cost of ``trinity plugins list`` compared with ``python -c "import torch"``.

Run: ``python benchmarks/bench_plugins_list.py`` (``--runs 7``). Each command runs as a fresh subprocess
(one untimed warm-up, then ``--runs`` timed runs); the table gives the best and median wall times and
the ratio of medians to ``import torch``. Goal: ``trinity plugins list`` under 2x ``import torch``: the
CLI imports torch through the component base classes, so everything beyond that ratio is discovery,
plugin imports and output. The plugin count line says how much was discovered, since the cost grows
with the installed plugins.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line

TARGET_RATIO = 2.0
"""``trinity plugins list`` may take at most this many times ``import torch`` (median wall time)."""


@dataclass
class Timing:
    """Wall times of one command over several runs."""

    label: str
    command: list[str]
    runs_s: list[float]

    @property
    def best(self) -> float:
        """Fastest run in seconds."""
        return min(self.runs_s)

    @property
    def median(self) -> float:
        """Median run in seconds."""
        return statistics.median(self.runs_s)


def _env() -> dict[str, str]:
    # Strict mode would turn an unrelated broken plugin into exit status 1; we time, not judge.
    return {k: v for k, v in os.environ.items() if k != "TRINITY_STRICT_PLUGINS"}


def trinity_command() -> list[str]:
    """The ``trinity`` console script of this interpreter, else ``python -m trinity_core.cli.main``."""
    script = Path(sys.executable).parent / ("trinity.exe" if os.name == "nt" else "trinity")
    if script.is_file():
        return [str(script)]
    found = shutil.which("trinity")
    return [found] if found else [sys.executable, "-m", "trinity_core.cli.main"]


def time_command(label: str, command: list[str], runs: int) -> Timing:
    """Run ``command`` once untimed, then ``runs`` times timed; fail loudly if it fails."""
    env = _env()
    times: list[float] = []
    for i in range(runs + 1):
        start = time.perf_counter()
        proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"{' '.join(command)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        if i > 0:  # the first run warms the page cache and .pyc files
            times.append(elapsed)
    return Timing(label, command, times)


def plugin_counts(command: list[str]) -> dict[str, int]:
    """Components, distributions, hook plugins and failures that ``plugins list --json`` reports."""
    proc = subprocess.run(
        [*command, "plugins", "list", "--json"], env=_env(), capture_output=True, text=True, check=True
    )
    payload = json.loads(proc.stdout)
    components = payload["components"]
    dists = {c["distribution"] for c in components}
    dists.update(h["distribution"] for h in payload["hooks"] if "distribution" in h)
    dists.update(f["entry_point"]["distribution"] for f in payload["failures"])
    return {
        "components": len(components),
        "distributions": len(dists),
        "hook plugins": len(payload["hooks"]),
        "failed": len(payload["failures"]),
    }


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def format_table(rows: list[Timing], baseline: Timing) -> str:
    """Markdown table: best, median, ratio of medians to ``baseline``, target and verdict."""
    lines = [
        "| command | best | median | vs import torch | target | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        ratio = row.median / baseline.median
        if row.label.startswith("trinity plugins list"):
            target, verdict = f"< {TARGET_RATIO:g}x", "met" if ratio < TARGET_RATIO else "MISSED"
        else:
            target, verdict = "-", "-"
        lines.append(
            f"| `{row.label}` | {_fmt(row.best)} | {_fmt(row.median)} | {ratio:.2f}x | {target} | {verdict} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Time the commands, print the table and plugin counts; exit 1 if the target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command (default 7)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    trinity = trinity_command()
    py = sys.executable
    cases = [
        ("python -c pass", [py, "-c", "pass"]),
        ('python -c "import torch"', [py, "-c", "import torch"]),
        ('python -c "import trinity_core"', [py, "-c", "import trinity_core"]),
        ("trinity plugins list", [*trinity, "plugins", "list"]),
        ("trinity plugins list --json", [*trinity, "plugins", "list", "--json"]),
    ]
    rows = [time_command(label, cmd, args.runs) for label, cmd in cases]
    baseline = rows[1]
    counts = plugin_counts(trinity)

    print(f"# trinity plugins list start-up ({args.runs} runs each, {machine_line()})\n")
    print(format_table(rows, baseline))
    print("\nInstalled plugins seen: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    print(f"trinity command: {' '.join(trinity)}")
    missed = [
        r
        for r in rows
        if r.label.startswith("trinity plugins list") and r.median / baseline.median >= TARGET_RATIO
    ]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
