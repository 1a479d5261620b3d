"""Policy losses forward + backward against trinity-rft 0.6.0: ``ppo`` and ``sapo``.

Run: ``python benchmarks/bench_losses.py`` (``--quick`` for fewer, shorter rounds; ``--shapes 64x1024``;
``--threads N``). For each loss, shape ``(B, T)`` and ``loss_agg_mode`` every side gets the same float32
inputs (old log-probs, current log-probs as a leaf that requires grad, a bool action mask with right
padding, per-token advantages) and is timed on ``loss, metrics = fn(logprob, ...); loss.backward()``:

* reference: ``trinity.algorithm.policy_loss_fn.{ppo,sapo}_policy_loss`` of trinity-rft 0.6.0;
* eager: trinity-core's plugin loss with its defaults (``fused=False``): the formula in plain torch,
  differentiated by autograd;
* fused: the same loss with ``fused=True`` (per-token loss and gradient compiled by ``torch.compile``).

Rounds alternate between the sides so that load from other processes hits all of them alike; each
time is the median over rounds of the mean call time in a round. Host synchronisations (``.item()``,
``.tolist()``, ...) of one call are counted with :func:`trinity_core.testing.count_host_syncs`. The
first fused call per shape compiles; its time is reported separately and is not in the timings.
Target (ratio to the reference): fused >= 5x with 0 syncs. The eager (default) path has no speed floor,
only 0 syncs: it is written as the formula, not for speed (the loss is a few percent of a training step;
what must hold there is ``trinity train``'s time per step, ``bench_e2e.py``). Its ratio is reported.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_reference_to_path, machine_line

MODES = ("token-mean", "seq-mean-token-mean")
SHAPES = ((64, 1024), (256, 2048))
FUSED_TARGET = 5.0
SIDES = ("reference", "eager", "fused")


def make_inputs(b: int, t: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Float32 loss inputs in verl names, shared by every side: right-padded rows, >= T/4 tokens each."""
    gen = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=gen)
    lengths = torch.randint(t // 4, t + 1, (b,), generator=gen)
    return {
        "log_prob": old + 0.3 * torch.randn(b, t, generator=gen),
        "old_log_probs": old,
        "response_mask": torch.arange(t)[None, :] < lengths[:, None],
        "advantages": torch.randn(b, t, generator=gen),
    }


def step(fn: Callable[..., Any], inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward + backward from a fresh leaf; returns the loss and the gradient."""
    logprob = inputs["log_prob"].clone().requires_grad_(True)
    rest = {k: v for k, v in inputs.items() if k != "log_prob"}
    loss, _metrics = fn(logprob, **rest)
    loss.backward()
    assert logprob.grad is not None
    return loss.detach(), logprob.grad


def interleaved_times(fns: dict[str, Callable[[], Any]], *, rounds: int, min_time: float) -> dict[str, float]:
    """Median over ``rounds`` of the mean call time per side; sides alternate within each round."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm-up: allocator, caches
    for _ in range(rounds):
        for name, fn in fns.items():
            gc.collect()
            gc.disable()
            try:
                calls, start = 0, time.perf_counter()
                while True:
                    fn()
                    calls += 1
                    elapsed = time.perf_counter() - start
                    if elapsed >= min_time:
                        break
            finally:
                gc.enable()
            samples[name].append(elapsed / calls)
    return {name: statistics.median(values) for name, values in samples.items()}


def count_syncs(fn: Callable[[], Any]) -> int:
    """Host synchronisations of one call of ``fn``."""
    from trinity_core.testing import count_host_syncs

    with count_host_syncs() as log:
        fn()
    return len(log)


@dataclass
class Result:
    """Timings, sync counts and fused-vs-eager agreement of one (loss, shape, mode) case."""

    loss: str
    shape: tuple[int, int]
    mode: str
    seconds: dict[str, float]
    syncs: dict[str, int]
    loss_rel_diff: float
    grad_rel_diff: float
    notes: list[str] = field(default_factory=list)

    def speedup(self, side: str) -> float:
        """Reference time over ``side``'s time."""
        return self.seconds["reference"] / self.seconds[side]

    def met(self, side: str, target: float = 0.0) -> bool:
        """Whether ``side`` reaches ``target`` (none by default) with no host synchronisation."""
        return self.speedup(side) >= target and self.syncs[side] == 0


def build_losses(name: str, mode: str) -> dict[str, Callable[..., Any]]:
    """The three implementations of loss ``name`` (``ppo`` or ``sapo``) with ``loss_agg_mode=mode``."""
    if name == "ppo":
        from trinity.algorithm.policy_loss_fn.ppo_policy_loss import PPOPolicyLossFn as Ref  # type: ignore[import-not-found]
        from trinity_plugin_ppo import PPOPolicyLossFn as Ours

        args: dict[str, Any] = {"clip_range": 0.2, "loss_agg_mode": mode}
    else:
        from trinity.algorithm.policy_loss_fn.sapo_policy_loss import SAPOPolicyLossFn as Ref  # type: ignore[import-not-found]
        from trinity_plugin_sapo import SAPOPolicyLossFn as Ours  # type: ignore[assignment]

        args = {"loss_agg_mode": mode}
    return {"reference": Ref(**args), "eager": Ours(**args), "fused": Ours(**args, fused=True)}


def kernel_of(name: str) -> Any:
    """The compiled kernel object behind the fused path of ``name`` (for its compile time)."""
    if name == "ppo":
        from trinity_plugin_ppo._kernel import PPO_KERNEL

        return PPO_KERNEL
    from trinity_plugin_sapo._kernel import SAPO_KERNEL

    return SAPO_KERNEL


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a − b| / max |b|`` (0 when both are 0)."""
    scale = float(b.abs().max())
    return float((a - b).abs().max()) / scale if scale > 0 else float((a - b).abs().max())


def run_case(
    name: str, shape: tuple[int, int], mode: str, rounds: int, min_time: float, compile_log: dict[str, float]
) -> Result:
    """Check agreement, count syncs, then time the three sides of one case."""
    inputs = make_inputs(*shape)
    losses = build_losses(name, mode)
    kernel = kernel_of(name)
    before = kernel.compile_seconds
    fused_loss, fused_grad = step(losses["fused"], inputs)  # compiles on a new shape
    compile_log.setdefault(f"{name} {shape[0]}x{shape[1]}", kernel.compile_seconds - before)
    eager_loss, eager_grad = step(losses["eager"], inputs)
    calls: dict[str, Callable[[], Any]] = {side: partial(step, losses[side], inputs) for side in SIDES}
    syncs = {side: count_syncs(call) for side, call in calls.items()}
    seconds = interleaved_times(calls, rounds=rounds, min_time=min_time)
    result = Result(
        name,
        shape,
        mode,
        seconds,
        syncs,
        relative_difference(fused_loss, eager_loss),
        relative_difference(fused_grad, eager_grad),
    )
    if kernel.compiled is False:
        result.notes.append("torch.compile unavailable: the fused path ran eagerly")
    return result


def _fmt(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.0f} us"


def format_results(results: list[Result]) -> str:
    """Markdown table: times, syncs per call and speed-ups of eager and fused over the reference."""
    lines = [
        "| loss | (B, T) | loss_agg_mode | reference | syncs | eager | syncs | speedup | fused | syncs "
        "| speedup | verdict |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        eager_ok = r.met("eager")
        fused_ok = r.met("fused", FUSED_TARGET)
        verdict = "met" if eager_ok and fused_ok else f"MISSED ({'eager syncs' if not eager_ok else 'fused'})"
        lines.append(
            f"| {r.loss} | {r.shape[0]} x {r.shape[1]} | {r.mode} | {_fmt(r.seconds['reference'])} | "
            f"{r.syncs['reference']} | {_fmt(r.seconds['eager'])} | {r.syncs['eager']} | "
            f"{r.speedup('eager'):.1f}x | {_fmt(r.seconds['fused'])} | {r.syncs['fused']} | "
            f"{r.speedup('fused'):.1f}x | {verdict} |"
        )
    return "\n".join(lines)


def _load() -> str:
    """The 1, 5 and 15 minute load averages (other work on the machine moves every timing)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Print the comparison table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", nargs="+", default=[f"{b}x{t}" for b, t in SHAPES], help="BxT ...")
    parser.add_argument("--modes", nargs="+", default=list(MODES))
    parser.add_argument("--losses", nargs="+", default=["ppo", "sapo"], choices=["ppo", "sapo"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--min-time", type=float, default=0.15, help="seconds per side per round")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="5 rounds of 0.05 s")
    args = parser.parse_args(argv)
    rounds, min_time = (5, 0.05) if args.quick else (args.rounds, args.min_time)
    torch.set_num_threads(args.threads)
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes]
    add_reference_to_path()

    load_before = _load()
    compile_log: dict[str, float] = {}
    results = []
    for name in args.losses:
        for shape in shapes:
            for mode in args.modes:
                results.append(run_case(name, shape, mode, rounds, min_time, compile_log))  # type: ignore[arg-type]
    print(f"Policy losses, forward + backward, trinity-core vs trinity-rft 0.6.0 ({machine_line()})")
    print(f"Load average before and after: {load_before} / {_load()}\n")
    print(format_results(results))
    print()
    print(
        f"Targets: fused >= {FUSED_TARGET:g}x the reference's speed, eager and fused with 0 host syncs per "
        f"call (eager has no speed floor); medians of {rounds} interleaved rounds of >= {min_time:g} s "
        "per side."
    )
    for key, seconds in compile_log.items():
        print(f"- torch.compile time, first fused call of {key}: {seconds:.1f} s (excluded above)")
    worst_loss = max(r.loss_rel_diff for r in results)
    worst_grad = max(r.grad_rel_diff for r in results)
    print(f"- fused vs eager: max relative difference {worst_loss:.1e} (loss), {worst_grad:.1e} (gradient)")
    for r in results:
        for note in r.notes:
            print(f"- {r.loss} {r.shape}: {note}")
    met = all(r.met("eager") and r.met("fused", FUSED_TARGET) for r in results)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
