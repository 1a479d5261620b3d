"""The experience decoder on crafted worst cases: seconds per byte from 10 KB to 1 MB, one thread.

Run: ``python benchmarks/bench_codec_worst.py`` (``--sizes 10000 1000000``, ``--cases "many keys"``,
``--rounds 3``). Each case of ``codec_worst_cases.py`` is built at each size with as many items as fit
and decoded (or refused) by ``deserialize_many``; a time is the median over rounds of the process's CPU
time (``time.process_time``: other processes' load does not count), one torch thread, with Python's
garbage collector paused by this harness and, interleaved, running as it does in a program.

The table gives microseconds per payload byte at each size (collector paused: the decoder's own work),
the slope of log time against log size (1 is linear, 2 quadratic) and the times at the largest size.
Targets, on the collector-paused times: slope at most ``MAX_SLOPE``, at most ``BOUND_US_PER_BYTE``
microseconds per byte, and under one second for every payload up to 1 MB. Exits 1 when one is missed.
The same one-second check with the collector running is printed on its own line.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import gc
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from codec_worst_cases import CASES, payload
from common import machine_line

from trinity_core.codec import ExperienceDecodeError, deserialize_many

SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
#: Slope of log time against log size that still counts as linear (fixed costs make small sizes slower).
MAX_SLOPE = 1.2
#: The documented bound of the decoder's work per payload byte (collector paused), in microseconds.
BOUND_US_PER_BYTE = 1.0
#: No payload of up to 1 MiB may take longer than this, in seconds.
MAX_SECONDS = 1.0
ONE_MIB = 1 << 20


def label(size: int) -> str:
    """``10K``, ``1M``: a size in the table's header."""
    return f"{size // 1_000_000}M" if size % 1_000_000 == 0 else f"{size // 1000}K"


def decode_once(data: bytes, *, collector: bool) -> tuple[float, str]:
    """CPU seconds of one decode of ``data`` (the collector running or paused) and what it gave."""
    gc.collect()
    if not collector:
        gc.disable()
    out = None
    start = time.process_time()
    try:
        out = deserialize_many(data)
        outcome = f"{len(out):,} item{'' if len(out) == 1 else 's'}"
    except ExperienceDecodeError:
        outcome = "refused"
    elapsed = time.process_time() - start
    gc.enable()
    del out
    return elapsed, outcome


def measure(data: bytes, rounds: int) -> tuple[float, float, str]:
    """Median CPU seconds with the collector paused and running (interleaved), and the outcome."""
    paused, running = [], []
    outcome = ""
    for _ in range(rounds):
        seconds, outcome = decode_once(data, collector=False)
        paused.append(seconds)
        running.append(decode_once(data, collector=True)[0])
    return statistics.median(paused), statistics.median(running), outcome


def slope(sizes: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) against log(size)."""
    xs = [math.log(size) for size in sizes]
    ys = [math.log(max(value, 1e-9)) for value in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sizes = sorted(args.sizes)
    print(machine_line())
    print(f"load before: {Path('/proc/loadavg').read_text().strip()}")
    header = " | ".join(f"us/B {label(size)}" for size in sizes)
    largest = label(sizes[-1])
    times = f"{largest} paused | {largest} collector on"
    print(f"\n| case | result at {largest} | {header} | slope | {times} | verdict |")
    print("|---|---|" + "---:|" * len(sizes) + "---:|---:|---:|---|")
    missed, slow_with_collector = [], []
    for case in args.cases:
        lengths, paused, running, outcome = [], [], [], ""
        for size in sizes:
            data = payload(case, size)
            seconds, seconds_running, outcome = measure(data, args.rounds)
            lengths.append(len(data))
            paused.append(seconds)
            running.append(seconds_running)
            if len(data) <= ONE_MIB and seconds_running > MAX_SECONDS:
                slow_with_collector.append(f"{case} ({len(data):,} B: {seconds_running:.2f} s)")
        per_byte = [1e6 * t / n for t, n in zip(paused, lengths, strict=True)]
        fitted = slope(lengths, paused)
        ok = (
            fitted <= MAX_SLOPE
            and max(per_byte) <= BOUND_US_PER_BYTE
            and all(t <= MAX_SECONDS for t, n in zip(paused, lengths, strict=True) if n <= ONE_MIB)
        )
        if not ok:
            missed.append(case)
        cells = " | ".join(f"{value:.3f}" for value in per_byte)
        print(
            f"| {case} | {outcome} | {cells} | {fitted:.2f} | {1e3 * paused[-1]:.1f} ms | "
            f"{1e3 * running[-1]:.1f} ms | {'met' if ok else 'MISSED'} |",
            flush=True,
        )
    print(f"\nload after: {Path('/proc/loadavg').read_text().strip()}")
    print(
        f"targets (collector paused): slope <= {MAX_SLOPE}, <= {BOUND_US_PER_BYTE} us/B, "
        f"< {MAX_SECONDS:g} s up to 1 MiB: {'MISSED by ' + ', '.join(missed) if missed else 'met'}"
    )
    print(
        f"with the collector running, payloads of up to 1 MiB over {MAX_SECONDS:g} s: "
        + (", ".join(slow_with_collector) if slow_with_collector else "none")
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
