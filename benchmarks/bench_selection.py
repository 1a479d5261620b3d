"""Task selection and dynamic sampling on a task mixture: ``difficulty_based`` + ``dynamic_sampling``
against ``shuffle`` alone, steps and seconds until the learnable part reaches a target.

The mixture (equal weights, each task set a pool of rows drawn once):

* ``last_digit``: the default task (last digit of a+b), the part the model can learn;
* ``copy`` of one digit (``"7="`` -> ``"7"``): learned quickly, then every group is solved (no signal);
* ``unsolvable`` (``"7+8%="`` -> ``"~"``): its answer is a character outside the model's vocabulary, so
  no response can ever be right (every group scores 0: no signal), standing in for prompts beyond the
  model's reach.

All three use the default task's characters and answer budget (one character and EOS), so the model and
its vocabulary are the embedded default's. Both configurations sample 16 prompts of 16 responses per step
from the same pools with the same model,
learning rate and seed. ``shuffle`` trains on whatever it sampled; ``difficulty_based`` picks the rows
whose estimated pass rate is nearest 0.5 within each task set and ``dynamic_sampling`` drops the groups
whose rewards are all equal, sampling up to 3 extra rounds to refill the step (a step with no group of
signal after them, as early on when the model solves nothing, trains on its first round unfiltered:
``when_empty: keep``). Measured: the greedy
accuracy on 100 held-out ``last_digit`` prompts every ``--eval-every`` steps; a run stops at the first
evaluation at or above ``--target`` (or at ``--steps``). Reported per run: steps and seconds (the sum of
the steps' wall times, evaluation excluded) to the target, and the share of the task groups trained on
that had no signal (``buffer/zero_variance_groups``, the zero-advantage groups).

    python benchmarks/bench_selection.py --quick                   # one seed, few steps: it works
    python benchmarks/bench_selection.py --seeds 0,1,2             # the table of docs/benchmarks.md

Runs are resumable: each writes ``<out>/<config>-seed<k>/`` (a run directory with checkpoints) and, when
finished, ``<out>/<config>-seed<k>.json``; a second invocation skips finished runs and resumes
interrupted ones from their last checkpoint. The two configurations alternate (the order flips every
seed) so that load on the shared machine hits both alike; the load average is recorded with each run.
Torch runs on one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch

from trinity_core import registry
from trinity_core.components import ComponentArgs
from trinity_core.hooks import HookCallError, get_plugin_manager
from trinity_core.hookspecs import hookimpl
from trinity_core.train.data.tasks import Task
from trinity_core.train.run import RunFinished, train

ROOT = Path(__file__).resolve().parents[1]


class UnsolvableTask(Task):
    """Prompt ``"7+8%="``, answer ``"~"``: a character outside the model's vocabulary (never produced)."""

    Args: ClassVar[type[ComponentArgs]] = ComponentArgs

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``answer``."""
        return ("prompt", "answer")

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """Two random digits as ``a+b%=``."""
        ab = torch.randint(0, 10, (n, 2), generator=generator).tolist()
        return [{"prompt": f"{a}+{b}%=", "answer": "~"} for a, b in ab]

    def alphabet(self) -> str:
        """The default task's characters: ``~`` is not among them."""
        return "0123456789+=%"

    def max_response_tokens(self) -> int:
        """One character and EOS."""
        return 2


MIXTURE = [
    {"name": "last_digit", "pool_size": 400, "weight": 1.0},
    {"name": "copy", "args": {"length": 1, "letters": "0123456789"}, "pool_size": 100, "eval": False},
    {"name": "unsolvable", "pool_size": 100, "weight": 1.0, "eval": False},
]

CONFIGS: dict[str, dict[str, Any]] = {
    "shuffle": {"tasks": {"selector": "shuffle"}, "rollout": {}},
    "difficulty+dynamic": {
        "tasks": {
            "selector": "difficulty_based",
            "selector_args": {"responses": 16, "temperature": 0.3, "decay": 0.05},
        },
        "rollout": {
            "experience_pipeline": [
                {"name": "dynamic_sampling", "args": {"max_extra_rounds": 3, "when_empty": "keep"}}
            ]
        },
    },
}


def run_config(name: str, seed: int, steps: int, eval_every: int) -> dict[str, Any]:
    """The training config of configuration ``name``."""
    variant = CONFIGS[name]
    return {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 16, "kl_loss_fn": "none"},
        "tasks": {
            "mix": MIXTURE,
            "reward_fns": ["exact_match"],
            "eval_size": 100,
            "eval_k": 0,
            **variant["tasks"],
        },
        "rollout": {"prompts_per_step": 16, **variant["rollout"]},
        "trainer": {
            "total_steps": steps,
            "seed": seed,
            "threads": 1,
            "progress": False,
            "eval_every": eval_every,
            "checkpoint_every": eval_every,
            "keep_checkpoints": 1,
            "log_samples_every": 0,
            "trackers": [],
        },
    }


class StopAtTarget(RuntimeError):
    """The learnable part reached the target: the run is over."""


class TargetWatch:
    """Stops the run at the first evaluation at or above ``target``."""

    def __init__(self, target: float) -> None:
        self.target = target

    @hookimpl
    def trinity_on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        score = metrics.get("eval/greedy_reward")
        if score is not None and score >= self.target:
            raise StopAtTarget(f"step {step + 1}: greedy accuracy {score:.3f}")


def load() -> str:
    """The 1-minute load average."""
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "n/a"


def summarize(run_dir: Path, target: float) -> dict[str, Any]:
    """Steps and seconds to the target, the share of zero-signal groups trained on, the last accuracy."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    reached = next((r for r in rows if r.get("eval/greedy_reward", -1.0) >= target), None)
    upto = [r for r in rows if reached is None or r["step"] <= reached["step"]]
    evals = [(int(r["step"]), r["eval/greedy_reward"]) for r in rows if "eval/greedy_reward" in r]
    return {
        "steps_to_target": int(reached["step"]) if reached else None,
        "seconds_to_target": sum(r.get("time/step_s", 0.0) for r in upto) if reached else None,
        "seconds": sum(r.get("time/step_s", 0.0) for r in rows),
        "steps": len(rows),
        "zero_signal_groups_trained": statistics.fmean(r["buffer/zero_variance_groups"] for r in upto),
        "prompts_sampled_per_step": statistics.fmean(r.get("buffer/prompts_sampled", 16.0) for r in upto),
        "evals": evals,
    }


def run_one(name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Train (or resume, or read) one configuration and seed; its summary."""
    out = Path(args.out)
    result_file, run_dir = out / f"{name}-seed{seed}.json", out / f"{name}-seed{seed}"
    if result_file.exists():
        return dict(json.loads(result_file.read_text()))
    begin = load()
    pm, watch = get_plugin_manager(), TargetWatch(args.target)
    pm.register(watch, name="bench-target")
    started = time.perf_counter()
    try:
        if (run_dir / "checkpoints" / "latest").exists():
            train(resume=run_dir)
        else:
            train(run_config(name, seed, args.steps, args.eval_every), run_dir=run_dir, overwrite=True)
    except HookCallError as exc:
        if not isinstance(exc.__cause__, StopAtTarget):
            raise
    except RunFinished:  # interrupted after its last step, before its result was written
        pass
    finally:
        pm.unregister(name="bench-target")
    result = {
        "config": name,
        "seed": seed,
        **summarize(run_dir, args.target),
        "wall_s": time.perf_counter() - started,
        "load": f"{begin} -> {load()}",
    }
    out.mkdir(parents=True, exist_ok=True)
    result_file.write_text(json.dumps(result, indent=1))
    return result


def _reached(r: dict[str, Any], key: str, fmt: str) -> str:
    """The figure, or ``> what the run used`` when it ended without reaching the target."""
    if r[key] is not None:
        return format(r[key], fmt)
    spent = r["steps"] if key == "steps_to_target" else r["seconds"]
    return f"> {spent:{fmt}} (not reached)"


def table(results: list[dict[str, Any]], target: float) -> str:
    """The per-run table and the per-configuration medians (a run that missed the target counts with
    the steps and seconds it ran, a lower bound)."""
    lines = [
        f"| configuration | seed | steps to {target:g} | seconds to {target:g} | best greedy accuracy "
        "| zero-signal groups trained | prompts sampled / step | load (1 min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        best = max((v for _, v in r["evals"]), default=float("nan"))
        lines.append(
            f"| {r['config']} | {r['seed']} | {_reached(r, 'steps_to_target', 'd')} | "
            f"{_reached(r, 'seconds_to_target', '.0f')} | {best:.2f} | "
            f"{r['zero_signal_groups_trained']:.2f} | "
            f"{r['prompts_sampled_per_step']:.1f} | {r['load']} |"
        )
    for name in CONFIGS:
        mine = [r for r in results if r["config"] == name]
        if not mine:
            continue
        reached = sum(r["steps_to_target"] is not None for r in mine)
        steps = statistics.median(r["steps_to_target"] or r["steps"] for r in mine)
        secs = statistics.median(r["seconds_to_target"] or r["seconds"] for r in mine)
        zero = statistics.fmean(r["zero_signal_groups_trained"] for r in mine)
        lines.append(
            f"| **{name}** (median; {reached}/{len(mine)} reached) | | {steps:.0f} | {secs:.0f} | | "
            f"{zero:.2f} | | |"
        )
    return "\n".join(lines)


def main() -> int:
    """Run the grid (resumable) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 40 steps, target 0.3: it works")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--steps", type=int, default=1000, help="most steps per run")
    parser.add_argument("--target", type=float, default=0.8, help="greedy accuracy on last_digit to reach")
    parser.add_argument("--eval-every", type=int, default=20, help="steps between evaluations")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench_selection"), help="results folder")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.target, args.eval_every = "0", 40, 0.3, 10
        args.out = str(Path(args.out) / "quick")
    torch.set_num_threads(1)
    registry.register("task", "unsolvable", UnsolvableTask, replace=True)
    print(f"load at start: {load()}; torch threads {torch.get_num_threads()}", flush=True)
    results = []
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
        order = list(CONFIGS) if i % 2 == 0 else list(reversed(CONFIGS))
        for name in order:
            result = run_one(name, seed, args)
            print(json.dumps({k: v for k, v in result.items() if k != "evals"}), flush=True)
            results.append(result)
    results.sort(key=lambda r: (list(CONFIGS).index(r["config"]), r["seed"]))
    print(table(results, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
