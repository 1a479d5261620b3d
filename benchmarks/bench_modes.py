"""Modes against each other: ``both`` (offset 0), ``both`` with ``sync_offset: 1``, and ``async``.

Run: ``python benchmarks/bench_modes.py [--steps 60]``. Two workloads, the same seed for every mode:

* ``default``: the embedded default task (generation about a quarter of a lock-step step);
* ``reverse``: reverse a 14-letter string (15-token answers: generation over half of a step).

First the overlap bound: each workload in lock step, profiled, with 1 and 2 torch threads. The best lock
step is ``min_T (gen_T + learn_T)``; overlapping the two phases, one core each, at best takes
``max(gen_1, learn_1)`` per step, so the bound is their ratio. Then each mode: experiences per second,
wall time to the reward target (first step whose 10-step mean reward reaches it), final reward (mean of
the last 10 steps) and each part's mean idle fraction. Prints a Markdown table and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line

WORKLOADS: dict[str, dict[str, Any]] = {
    "default": {"target": 0.5},
    "reverse": {
        "tasks": {"name": "reverse", "args": {"length": 14, "letters": "abc"}, "eval_size": 0},
        "target": 0.2,
    },
}
MODES = {
    "both, offset 0": {"mode": "both", "synchronizer": {"sync_offset": 0}},
    "both, offset 1": {"mode": "both", "synchronizer": {"sync_offset": 1}},
    "async": {"mode": "async", "synchronizer": {"sync_offset": 1}},
}


def _config(workload: str, steps: int, threads: int | None, **extra: Any) -> dict[str, Any]:
    spec = dict(WORKLOADS[workload])
    spec.pop("target")
    config: dict[str, Any] = {
        "trainer": {"total_steps": steps, "checkpoint_every": 0, "progress": False, "seed": 0},
        **spec,
        **extra,
    }
    config.setdefault("tasks", {})["eval_size"] = 0
    if threads is not None:
        config["trainer"]["threads"] = threads
    return config


def _run(config: dict[str, Any], profile: bool = False) -> Any:
    from trinity_core.train import train

    with tempfile.TemporaryDirectory() as tmp:
        return train(config, run_dir=Path(tmp) / "run", profile=profile)


def overlap_bound(workload: str, steps: int) -> tuple[float, str]:
    """The best speedup overlap allows over the best lock step, and how it was found."""
    phases = {}
    for threads in (1, 2):
        result = _run(_config(workload, steps, threads), profile=True)
        prof = result.profile
        gen = prof["generation_ms"]
        phases[threads] = (gen, prof["step_ms"] - gen)
    lock = min(g + learn for g, learn in phases.values())
    overlapped = max(phases[1])
    text = ", ".join(f"{t} thread(s): generation {g:.1f} ms, rest {r:.1f} ms" for t, (g, r) in phases.items())
    return lock / overlapped, f"{text}; bound {lock:.1f} / {overlapped:.1f} ms = {lock / overlapped:.2f}x"


def measure(workload: str, mode: str, steps: int) -> dict[str, float]:
    """One mode on one workload: throughput, time to the target, final reward, idle fractions."""
    result = _run(_config(workload, steps, None, **MODES[mode]))
    rows = result.history[1:]  # the first step holds the start-up (and the explorer process's)
    wall = sum(r["time/step_s"] for r in rows)
    exps = sum(r["throughput/experiences_per_s"] * r["time/step_s"] for r in rows)
    rewards = [r["reward/mean"] for r in result.history]
    target, elapsed, to_target = WORKLOADS[workload]["target"], 0.0, float("nan")
    for i, row in enumerate(rows, start=1):
        elapsed += row["time/step_s"]
        if sum(rewards[max(0, i - 9) : i + 1]) / len(rewards[max(0, i - 9) : i + 1]) >= target:
            to_target = elapsed
            break
    return {
        "exp_per_s": exps / wall,
        "to_target_s": to_target,
        "final": sum(rewards[-10:]) / len(rewards[-10:]),
        "explorer_idle": sum(r["explorer/idle_fraction"] for r in rows) / len(rows),
        "learner_idle": sum(r["learner/idle_fraction"] for r in rows) / len(rows),
    }


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--probe-steps", type=int, default=20)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    print(machine_line(), f"| load average {os.getloadavg()[0]:.1f} at start")
    print(
        "| workload | mode | exp/s | vs lock step | vs bound | s to target | final reward "
        "| explorer idle | learner idle |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for workload in args.workloads:
        bound, how = overlap_bound(workload, args.probe_steps)
        notes.append(f"{workload}: {how}")
        base = None
        for mode in MODES:
            m = measure(workload, mode, args.steps)
            base = base or m["exp_per_s"]
            speedup = m["exp_per_s"] / base
            print(
                f"| {workload} | {mode} | {m['exp_per_s']:.0f} | {speedup:.2f}x | {speedup / bound:.0%} | "
                f"{m['to_target_s']:.1f} | {m['final']:.3f} | {m['explorer_idle']:.2f} | "
                f"{m['learner_idle']:.2f} |",
                flush=True,
            )
    print("\n".join(notes))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
