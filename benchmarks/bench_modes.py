"""Modes against each other: ``both`` (offset 0), ``both`` with ``sync_offset: 1`` (the explorer in a
thread, or in a process with ``synchronizer.explorer_process``), and ``async``.

Run: ``OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_modes.py`` (about 10 minutes on a quiet 2-core
machine; ``--steps``/``--probe-steps`` shorten it). Two workloads, the same seed for every run:

* ``default``: the embedded default run (``trinity train`` with no config: last digit of a+b, grpo,
  16 prompts x 16 responses a step; generation about a quarter of a lock-step step);
* ``reverse``: the same run on reversing a 14-letter string (15-token answers; the probe prints the split
  of a lock-step step between generation and the rest);
* ``reverse-small``: ``reverse`` with 4 prompts a step (64 rows), the generation-heavy workload.

Every run is a fresh process (``--one``), started with ``OMP_WAIT_POLICY=PASSIVE`` (idle OpenMP threads
sleep instead of spinning on the cores the other part needs; OpenMP reads it when torch is imported).

1. **Phase probe and overlap bound.** Each workload in lock step with 1 and 2 torch threads
   (``trainer.threads``): seconds per step (after the first) and the profiler's generation share give
   ``gen_T`` and ``rest_T``. The best lock step takes ``min_T (gen_T + rest_T)``; overlapping the phases,
   each with its share of the cores (``--explorer-threads`` + ``--learner-threads`` = the cores), takes at
   best ``max(gen_E, rest_L)``; the bound is the ratio.
2. **Modes.** Offset 0 with the best probe's threads (the lock-step baseline); offset 1 (explorer
   thread, explorer process) and async with ``synchronizer.explorer_threads`` / ``learner_threads``
   (``--modes`` picks some). Per mode: experiences per second (after the
   first step), speedup over lock step and its share of the bound, wall seconds to the reward target
   (first step whose 10-step mean reward reaches it), final reward (mean of the last 50 steps) and each
   part's mean idle fraction, each the mean over ``--seeds`` (the final rewards of every seed in
   brackets). Prints a Markdown table and the machine's load.
3. **Learner ranks and explorer processes** (``--layouts 1x1,2x1,1x2,2x2``, ``N x M``): mode async on
   ``reverse-small`` with ``N`` learner ranks (``torchrun --nproc_per_node N``) and ``M`` explorer
   processes (``synchronizer.explorers``), one torch thread per process. Per layout: experiences per
   second (after the first step), the learner's and the explorers' idle fractions, and the bound it is
   compared to: a step needs ``gen_1`` of explorer time and ``rest_1`` of learner time (the 1-thread
   probe), split over ``M`` and ``N`` processes on ``cores`` cores, so it takes at least
   ``max(gen_1 / M, rest_1 / N, (gen_1 + rest_1) / cores)``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line

WORKLOADS: dict[str, dict[str, Any]] = {
    "default": {"target": 0.2, "steps": 300},
    "reverse": {
        "tasks": {"name": "reverse", "args": {"length": 14, "letters": "abc"}},
        "target": None,  # exact match of 14 letters: the reward stays 0 for hundreds of steps
        "steps": 60,
    },
    # Generation-heavy: the same answers for a quarter of the rows. Generating a token costs a step's
    # worth of per-call overhead whatever the rows, the update scales with the rows.
    "reverse-small": {
        "tasks": {"name": "reverse", "args": {"length": 14, "letters": "abc"}},
        "rollout": {"prompts_per_step": 4},
        "target": None,
        "steps": 100,
    },
}
FINAL = 50
"""Steps the final reward is averaged over."""
MODES = {
    "lock": "both, offset 0",
    "offset1": "both, offset 1",
    "offset1-process": "both, offset 1, process",
    "async": "async",
}
"""``--modes`` names and the table's labels."""


def _config(workload: str, steps: int, seed: int = 0, **extra: Any) -> dict[str, Any]:
    """The embedded default run (no config) with the workload's, the seed's and ``extra``'s keys on top."""
    from trinity_core.train.run import DEFAULT_CONFIG

    config: dict[str, Any] = copy.deepcopy(DEFAULT_CONFIG)
    spec = {k: v for k, v in WORKLOADS[workload].items() if k not in ("target", "steps")}
    run = {"trainer": {"total_steps": steps, "checkpoint_every": 0, "progress": False, "seed": seed}}
    for layer in (spec, run, {"tasks": {"eval_size": 0}}, extra):
        for section, values in layer.items():
            config.setdefault(section, {}).update(values)
    return config


def run_one(config: dict[str, Any], profile: bool, run_dir: str | None = None) -> dict[str, Any]:
    """One run in this process: its history and profile (the ``--one`` entry; under torchrun every rank
    runs it in ``run_dir``)."""
    from trinity_core.train import train

    with tempfile.TemporaryDirectory() as tmp:
        result = train(config, run_dir=Path(run_dir or tmp) / "run", profile=profile)
    keep = ("time/step_s", "reward/mean", "throughput/experiences_per_s")
    idle = ("explorer/idle_fraction", "learner/idle_fraction")
    history = [{k: row[k] for k in keep + idle if k in row} for row in result.history]
    return {"history": history, "profile": result.profile}


def _spawn(config: dict[str, Any], profile: bool = False, ranks: int = 1) -> dict[str, Any]:
    """:func:`run_one` in a fresh process with ``OMP_WAIT_POLICY=PASSIVE``; with ``ranks > 1`` in that many
    learner ranks (torchrun on a loopback rendezvous, one thread each), rank 0 reporting."""
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    with tempfile.TemporaryDirectory() as tmp:
        request = json.dumps({"config": config, "profile": profile, "run_dir": tmp})
        launcher = [sys.executable]
        if ranks > 1:
            env["OMP_NUM_THREADS"] = "1"
            launcher += ["-m", "torch.distributed.run", "--nproc_per_node", str(ranks)]
            launcher += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
        out = subprocess.run(
            [*launcher, __file__, "--one", request], env=env, check=True, capture_output=True, text=True
        )
    lines = [line for line in out.stdout.splitlines() if line.startswith('{"history"')]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seconds_per_step(history: list[dict[str, float]]) -> float:
    rows = history[1:]  # the first step holds the start-up (and the explorer process's)
    return sum(r["time/step_s"] for r in rows) / len(rows)


def probe(workload: str, steps: int, explorer: int, learner: int) -> tuple[float, int, str]:
    """The overlap bound, the lock step's best thread count, and how they were found."""
    phases = {}
    for threads in sorted({1, 2, explorer, learner}):
        result = _spawn(_config(workload, steps, trainer={"threads": threads}), profile=True)
        step_ms = 1000 * _seconds_per_step(result["history"])
        share = result["profile"]["generation_ms"] / result["profile"]["step_ms"]
        phases[threads] = (share * step_ms, (1 - share) * step_ms)
    best = min(phases, key=lambda t: sum(phases[t]))
    lock, overlapped = sum(phases[best]), max(phases[explorer][0], phases[learner][1])
    text = ", ".join(f"{t} thread(s): generation {g:.1f} ms, rest {r:.1f} ms" for t, (g, r) in phases.items())
    bound = lock / overlapped
    return bound, best, f"{text}; bound {lock:.1f} / {overlapped:.1f} ms = {bound:.2f}x"


def measure(workload: str, mode: str, steps: int, threads: dict[str, int], seed: int) -> dict[str, float]:
    """One mode on one workload and seed: throughput, time to the target, final reward, idle fractions."""
    split = {"explorer_threads": threads["explorer"], "learner_threads": threads["learner"]}
    sections: dict[str, dict[str, Any]] = {
        "both, offset 0": {"trainer": {"threads": threads["lock"]}, "synchronizer": {"sync_offset": 0}},
        "both, offset 1": {"synchronizer": {"sync_offset": 1, **split}},
        "both, offset 1, process": {"synchronizer": {"sync_offset": 1, "explorer_process": True, **split}},
        "async": {"synchronizer": {"sync_offset": 1, **split}},
    }[mode]
    config = _config(workload, steps, seed, **sections)
    config["mode"] = "async" if mode == "async" else "both"
    history = _spawn(config)["history"]
    rows = history[1:]
    wall = sum(r["time/step_s"] for r in rows)
    exps = sum(r["throughput/experiences_per_s"] * r["time/step_s"] for r in rows)
    rewards = [r["reward/mean"] for r in history]
    target, elapsed, to_target = WORKLOADS[workload]["target"], 0.0, float("nan")
    for i, row in enumerate(rows, start=1):
        elapsed += row["time/step_s"]
        window = rewards[max(0, i - 9) : i + 1]
        if target is not None and sum(window) / len(window) >= target:
            to_target = elapsed
            break
    return {
        "exp_per_s": exps / wall,
        "to_target_s": to_target,
        "final": sum(rewards[-FINAL:]) / len(rewards[-FINAL:]),
        "explorer_idle": sum(r.get("explorer/idle_fraction", 0.0) for r in rows) / len(rows),
        "learner_idle": sum(r.get("learner/idle_fraction", 0.0) for r in rows) / len(rows),
    }


def measure_layout(workload: str, steps: int, ranks: int, explorers: int) -> dict[str, float]:
    """Mode async with ``ranks`` learner ranks and ``explorers`` explorer processes, one thread each."""
    one = {"explorer_threads": 1, "learner_threads": 1, "explorers": explorers}
    config = _config(workload, steps, trainer={"threads": 1}, synchronizer={"sync_offset": 1, **one})
    config["mode"] = "async"
    rows = _spawn(config, ranks=ranks)["history"][1:]
    wall = sum(r["time/step_s"] for r in rows)
    return {
        "exp_per_s": sum(r["throughput/experiences_per_s"] * r["time/step_s"] for r in rows) / wall,
        "explorer_idle": statistics.fmean(r["explorer/idle_fraction"] for r in rows),
        "learner_idle": statistics.fmean(r["learner/idle_fraction"] for r in rows),
    }


def layouts(spec: str, steps: int, probe_steps: int) -> None:
    """Print the table of learner ranks x explorer processes (section 3 of the module's docstring)."""
    workload, cores = "reverse-small", os.cpu_count() or 2
    result = _spawn(_config(workload, probe_steps, trainer={"threads": 1}), profile=True)
    step_ms = 1000 * _seconds_per_step(result["history"])
    share = result["profile"]["generation_ms"] / result["profile"]["step_ms"]
    gen, rest = share * step_ms, (1 - share) * step_ms
    rows_per_step = 4 * 16  # reverse-small: 4 prompts x 16 responses
    print(f"{workload}, lock step with 1 thread: generation {gen:.1f} ms, rest {rest:.1f} ms; {cores} cores")
    print("| N learner ranks | M explorers | exp/s | bound exp/s | vs bound | learner idle | explorer idle |")
    print("|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for item in spec.split(","):
        n, m = (int(x) for x in item.split("x"))
        got = measure_layout(workload, steps, n, m)
        bound = rows_per_step / (max(gen / m, rest / n, (gen + rest) / cores) / 1000)
        print(
            f"| {n} | {m} | {got['exp_per_s']:.0f} | {bound:.0f} | {got['exp_per_s'] / bound:.0%} | "
            f"{got['learner_idle']:.2f} | {got['explorer_idle']:.2f} |",
            flush=True,
        )


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="steps per mode run (default: per workload)")
    parser.add_argument("--probe-steps", type=int, default=40)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--seeds", default="0", help="comma-separated seeds of the mode runs (their means)")
    cores = os.cpu_count() or 2
    parser.add_argument("--explorer-threads", type=int, default=max(1, cores // 2))
    parser.add_argument("--learner-threads", type=int, default=max(1, cores - cores // 2))
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, in order, the first the baseline (default {','.join(MODES)})",
    )
    parser.add_argument(
        "--layouts",
        default=None,
        help="comma-separated NxM (learner ranks x explorer processes), e.g. 1x1,2x1,1x2,2x2: mode async on "
        "reverse-small instead of the modes table",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = sorted(set(args.modes.split(",")) - MODES.keys())
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")
    if args.one:
        request = json.loads(args.one)
        result = run_one(request["config"], request["profile"], request.get("run_dir"))
        if os.environ.get("RANK", "0") == "0":
            print(json.dumps(result))
        return
    print(machine_line(), f"| load average {os.getloadavg()[0]:.1f} at start")
    if args.layouts:
        layouts(args.layouts, args.steps or WORKLOADS["reverse-small"]["steps"], args.probe_steps)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        return
    print(f"explorer {args.explorer_threads} / learner {args.learner_threads} threads in offset 1 and async")
    print(
        "| workload | mode | exp/s | vs lock step | vs bound | s to target | final reward "
        "| explorer idle | learner idle |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    notes = []
    for workload in args.workloads:
        bound, best, how = probe(workload, args.probe_steps, args.explorer_threads, args.learner_threads)
        notes.append(f"{workload}: {how}; lock step with {best} thread(s)")
        threads = {"lock": best, "explorer": args.explorer_threads, "learner": args.learner_threads}
        steps = args.steps or WORKLOADS[workload]["steps"]
        base = None
        seeds = [int(s) for s in args.seeds.split(",")]
        for mode in (MODES[name] for name in args.modes.split(",")):
            runs = [measure(workload, mode, steps, threads, seed) for seed in seeds]
            m = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
            base = base or m["exp_per_s"]
            speedup = m["exp_per_s"] / base
            each = ", ".join(f"{r['final']:.3f}" for r in runs)
            finals = f" ({each})" if len(runs) > 1 else ""
            print(
                f"| {workload} | {mode} | {m['exp_per_s']:.0f} | {speedup:.2f}x | {speedup / bound:.0%} | "
                f"{m['to_target_s']:.1f} | {m['final']:.3f}{finals} | {m['explorer_idle']:.2f} | "
                f"{m['learner_idle']:.2f} |",
                flush=True,
            )
    print("\n".join(notes))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
