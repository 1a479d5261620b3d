"""End to end: ``trinity train`` against TRL 1.16 ``GRPOTrainer``, same model, tokenizer, prompts, reward,
sampling, group size, batch, micro-batching, learning rate and loss aggregation, on one thread.

TRL runs with ``loss_type="dapo"`` (token sum over the step's tokens: trinity's token-mean),
``beta=0``, ``scale_rewards="group"``, no gradient checkpointing, ``bf16=False``, one generation per
optimizer step (``num_iterations=1``, ``steps_per_generation = gradient_accumulation_steps``), its
default optimizer, and ``min_new_tokens`` as trinity's ``rollout.min_new_tokens``. ``--micro-batch M``
cuts a step's ``N = prompts x group`` rows into ``N / M`` micro-batches on both sides (trinity's
``trainer.micro_batch_size``; TRL's ``per_device_train_batch_size=M``, ``gradient_accumulation_steps``
and ``steps_per_generation`` ``N / M``); 0 is one micro-batch of ``N`` rows on both.

Both sides are timed by the same clock (``e2e_phases.py``): a step runs from fetching its prompts to
the end of ``optimizer.step()``, cut into generation / reward+advantage / log-probs / forward+backward /
optimizer at the same library calls, in wall and in process CPU time. Each run is a fresh process
(peak RSS is its ``ru_maxrss``) with every thread knob at 1 (``OMP``/``MKL``/``OPENBLAS``/...
``_NUM_THREADS``, ``torch.set_num_threads``, ``torch.set_num_interop_threads``); the sides alternate and the
order flips every repetition; each run prints its own figures and the 1-minute load at its start and end.

    python benchmarks/bench_e2e.py --stack toy --sizes 0.33M --steps 12 --reps 3
    python benchmarks/bench_e2e.py --stack real --sizes 10M,40M --prompts 4 --group 8 --micro-batch 8
    python benchmarks/bench_e2e.py --reward-time --seeds 0,1,2 --max-steps 1500

The TRL side runs with ``--trl-python`` (default: ``.venv-bench/bin/python``, a venv that sees this one's
packages plus ``trl==1.16.*``; see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_phases import PHASES, PhaseClock, instrument_trinity, instrument_trl
from e2e_stack import LR, REAL_ANSWER_TOKENS, build_real_stack, model_config

ROOT = Path(__file__).resolve().parents[1]
MIN_NEW_TOKENS = 1
"""trinity's default ``rollout.min_new_tokens``, given to TRL's ``generation_kwargs`` too."""
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
TARGETS = {("toy", "0.33M"): (1.5, None), ("real", "10M"): (1.2, 0.30), ("real", "40M"): (1.2, 0.30)}
"""Per stack and size: least TRL/trinity ms per step, least share of TRL's peak RSS saved (issue 31)."""


class TargetReached(Exception):
    """``--stop-at-reward``: the reward window reached its target; the run ends here."""


class RewardStop:
    """Stops a run at the start of the step after the mean reward of the last ``window`` steps reached
    ``target`` (``target`` None: never)."""

    def __init__(self, target: float | None, window: int = 5) -> None:
        self.target, self.window, self.rewards = target, window, []  # type: ignore[var-annotated]

    def check(self) -> None:
        """Raise :class:`TargetReached` when the window has reached the target."""
        tail = self.rewards[-self.window :]
        if self.target is not None and len(tail) == self.window and statistics.fmean(tail) >= self.target:
            raise TargetReached


# ---------------------------------------------------------------------------------------- the two sides


def run_trinity(a: argparse.Namespace, clock: PhaseClock, stop: RewardStop) -> None:
    """One ``trinity train`` run (rewards into ``stop.rewards``, steps into ``clock``)."""
    from trinity_core.train import train
    from trinity_core.train.learner import learner

    config: dict[str, Any] = {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": a.group, "kl_loss_fn": "none"},
        "rollout": {"prompts_per_step": a.prompts, "temperature": 1.0, "min_new_tokens": MIN_NEW_TOKENS},
        "trainer": {
            "total_steps": a.steps,
            "lr": LR,
            "seed": a.seed,
            "threads": 1,
            "checkpoint_every": 0,
            "progress": False,
            "trackers": [],
            "log_samples_every": 0,
            "micro_batch_size": a.micro_batch or None,
        },
        "tasks": {"name": "last_digit", "reward_fns": ["exact_match"], "eval_size": 0},
        "model": {"model_path": None, "config": model_config(a.size)},
    }
    if a.stack == "real":
        config["model"] = {"model_path": str(a.model_dir)}
        config["tasks"] = {"name": "dataset", "args": {"path": str(a.data)}, "reward_fns": ["exact_match"]}
        config["tasks"]["eval_size"] = 0
        config["rollout"]["max_new_tokens"] = REAL_ANSWER_TOKENS
    instrument_trinity(clock)
    metrics = learner.batch_metrics

    def recorded(batch: Any) -> Any:
        out = metrics(batch)
        stop.rewards.append(float(out["reward/mean"]))
        return out

    learner.batch_metrics = recorded
    clock.before_step = stop.check
    with tempfile.TemporaryDirectory() as tmp:
        train(config, run_dir=Path(tmp) / "run")


def _trl_rows(a: argparse.Namespace, tokenizer: Any) -> list[dict[str, Any]]:
    if a.stack == "real":
        return [json.loads(line) for line in Path(a.data).read_text().splitlines()]
    import torch

    from trinity_core import registry

    task = registry.create("task", "last_digit", {})
    rows = task.sample(a.prompts * a.steps, torch.Generator().manual_seed(a.seed))
    # trinity puts <bos> in front of every prompt; TRL tokenizes the text without special tokens.
    return [{"prompt": tokenizer.bos_token + r["prompt"], "answer": r["answer"]} for r in rows]


def run_trl(a: argparse.Namespace, clock: PhaseClock, stop: RewardStop) -> None:
    """One TRL ``GRPOTrainer`` run on the same stack and knobs."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trinity_core import registry
    from trinity_core.train.data.rewards import exact_match
    from trinity_core.train.models.policy import load_policy

    torch.manual_seed(a.seed * 1_000_003)
    if a.stack == "real":
        model = AutoModelForCausalLM.from_pretrained(a.model_dir)
        tok = AutoTokenizer.from_pretrained(a.model_dir)
        max_new = REAL_ANSWER_TOKENS
    else:
        task = registry.create("task", "last_digit", {})
        model, tok = load_policy(None, None, model_config(a.size), task.alphabet(), seed=a.seed)
        max_new = task.max_response_tokens()

    class Rewards(TrainerCallback):  # type: ignore[misc]
        def on_log(self, *args: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                stop.rewards.append(logs["reward"])

    def reward(prompts: list[str], completions: list[str], answer: list[str], **kw: Any) -> list[float]:
        return exact_match(prompts, completions, answer)

    rows = a.prompts * a.group
    micro = a.micro_batch or rows
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=rows // micro,
            steps_per_generation=rows // micro,
            num_generations=a.group,
            num_iterations=1,
            max_completion_length=max_new,
            generation_kwargs={"min_new_tokens": MIN_NEW_TOKENS},
            learning_rate=LR,
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            loss_type="dapo",
            beta=0.0,
            scale_rewards="group",
            temperature=1.0,
            bf16=False,
            use_cpu=True,
            gradient_checkpointing=False,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            max_steps=a.steps,
            seed=a.seed,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=Dataset.from_list(_trl_rows(a, tok)),
            processing_class=tok,
            callbacks=[Rewards()],
        )
        instrument_trl(clock, trainer)
        clock.before_step = stop.check
        trainer.train()


# ---------------------------------------------------------------------------------------- one run


class RssByPhase:
    """``--rss-profile``: the largest resident set seen in each phase (``set-up`` before the first step),
    sampled every ``period`` seconds by a daemon thread from ``/proc/self/statm`` (Linux)."""

    def __init__(self, clock: PhaseClock, period: float = 0.002) -> None:
        self.clock, self.period = clock, period
        self.peak: dict[str, float] = {}
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> RssByPhase:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        with open("/proc/self/statm") as statm:
            while not self._stop.wait(self.period):
                statm.seek(0)
                rss = int(statm.read().split()[1]) * self._page / 2**20
                phase = self.clock.phase or ("set-up" if not self.clock.steps else "between steps")
                self.peak[phase] = max(self.peak.get(phase, 0.0), rss)


def child(a: argparse.Namespace) -> None:
    """Run one side in this process and print its JSON line (steps, rewards, peak RSS, load)."""
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    load0 = os.getloadavg()[0]
    clock, stop = PhaseClock(), RewardStop(a.stop_at_reward)
    profile = RssByPhase(clock) if a.rss_profile else contextlib.nullcontext()
    with profile, contextlib.suppress(TargetReached):
        (run_trinity if a.child == "trinity" else run_trl)(a, clock, stop)
    out = {
        "steps": clock.steps,
        "reward": stop.rewards[: len(clock.steps)],
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_by_phase_mib": profile.peak if isinstance(profile, RssByPhase) else {},
        "load": [load0, os.getloadavg()[0]],
        "threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
    }
    print("RESULT " + json.dumps(out))


def spawn(
    side: str, a: argparse.Namespace, size: str, seed: int, steps: int, extra: list[str]
) -> dict[str, Any]:
    """One side in a fresh process (TRL's with ``--trl-python``), every thread knob at 1."""
    python = a.trl_python if side == "trl" else sys.executable
    cmd = [python, __file__, "--child", side, "--size", size, "--seed", str(seed), "--steps", str(steps)]
    cmd += ["--stack", a.stack, "--prompts", str(a.prompts), "--group", str(a.group), *extra]
    cmd += ["--micro-batch", str(a.micro_batch)] + (["--rss-profile"] if a.rss_profile else [])
    env = {**os.environ, **dict.fromkeys(THREAD_VARS, "1")}
    env |= {"PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"{side} failed:\n{proc.stderr[-4000:]}")
    return json.loads(line[len("RESULT ") :])


# ---------------------------------------------------------------------------------------- tables


def _measured(run: dict[str, Any], warmup: int) -> list[dict[str, Any]]:
    return run["steps"][warmup:] or run["steps"]


def run_row(label: str, run: dict[str, Any], warmup: int) -> str:
    """One run's line: load, step medians (wall, CPU), mean phases (wall / CPU ms), peak RSS."""
    steps = _measured(run, warmup)
    wall = 1000 * statistics.median(s["wall"] for s in steps)
    cpu = 1000 * statistics.median(s["cpu"] for s in steps)
    phases = " | ".join(
        f"{1000 * statistics.fmean(s['phases'][p][0] for s in steps):.0f} / "
        f"{1000 * statistics.fmean(s['phases'][p][1] for s in steps):.0f}"
        for p in PHASES
    )
    load = f"{run['load'][0]:.1f} -> {run['load'][1]:.1f}"
    return f"| {label} | {load} | {len(steps)} | {wall:.1f} | {cpu:.1f} | {phases} | {run['rss_mib']:.0f} |"


def per_step(a: argparse.Namespace, sizes: list[str], folder: Path) -> bool:
    """Per-run rows, then the sides' medians and ratios per size; True when every target is met."""
    print(
        f"{a.prompts} prompts x {a.group} responses per step, micro-batches of "
        f"{a.micro_batch or a.prompts * a.group} rows on both sides, {a.steps} steps per run "
        f"(the first {a.warmup} left out), {a.reps} runs per side, {os.cpu_count()} cores"
    )
    head = " | ".join(f"{p} ms wall / CPU" for p in PHASES)
    print(f"| run | load 1-min | steps | ms/step wall | ms/step CPU | {head} | peak RSS MiB |")
    print("|---|---|---|---|---|" + "---|" * len(PHASES) + "---|")
    met, summary = True, []
    for size in sizes:
        extra: list[str] = []
        if a.stack == "real":
            model_dir, data = build_real_stack(folder, size)
            extra = ["--model-dir", str(model_dir), "--data", str(data)]
        runs: dict[str, list[dict[str, Any]]] = {"trinity": [], "trl": []}
        for rep in range(a.reps):
            for side in ("trinity", "trl") if rep % 2 == 0 else ("trl", "trinity"):
                run = spawn(side, a, size, a.seed, a.steps, extra)
                runs[side].append(run)
                print(run_row(f"{a.stack} {size} {side} #{rep + 1}", run, a.warmup), flush=True)
                if run.get("rss_by_phase_mib"):
                    peaks = ", ".join(f"{k} {v:.0f}" for k, v in run["rss_by_phase_mib"].items())
                    print(f"  peak RSS MiB by phase: {peaks}", flush=True)
        med = {
            side: [
                1000 * statistics.median(s[k] for r in rs for s in _measured(r, a.warmup))
                for k in ("wall", "cpu")
            ]
            for side, rs in runs.items()
        }
        rss = {side: max(r["rss_mib"] for r in rs) for side, rs in runs.items()}
        ratio, saved = med["trl"][0] / med["trinity"][0], 1 - rss["trinity"] / rss["trl"]
        want_ratio, want_saved = TARGETS.get((a.stack, size), (None, None))
        ok = (want_ratio is None or ratio >= want_ratio) and (want_saved is None or saved >= want_saved)
        met &= ok
        verdict = "no target" if want_ratio is None else "met" if ok else "missed"
        summary.append(
            f"| {a.stack} | {size} | {med['trinity'][0]:.1f} / {med['trinity'][1]:.1f} | "
            f"{med['trl'][0]:.1f} / {med['trl'][1]:.1f} | **{ratio:.2f}x** | "
            f"{med['trl'][1] / med['trinity'][1]:.2f}x | {rss['trinity']:.0f} / {rss['trl']:.0f} "
            f"({-100 * saved:+.0f} %) | {verdict} |"
        )
    print(
        "\n| stack | size | trinity ms/step wall / CPU | TRL ms/step wall / CPU | TRL/trinity wall | "
        "TRL/trinity CPU | peak RSS MiB trinity / TRL | target |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(summary))
    return met


def time_to_reward(run: dict[str, Any], target: float, window: int = 5) -> tuple[int, float, float] | None:
    """``(steps, wall s, CPU s)`` summed over the step spans until the mean reward of the last ``window``
    steps first reaches ``target``; None: never."""
    rewards, steps = run["reward"], run["steps"]
    for i in range(window - 1, min(len(rewards), len(steps))):
        if statistics.fmean(rewards[i + 1 - window : i + 1]) >= target:
            done = steps[: i + 1]
            return i + 1, sum(s["wall"] for s in done), sum(s["cpu"] for s in done)
    return None


def reward_time(a: argparse.Namespace) -> None:
    """Steps and time to mean reward 0.9 (5-step window) per seed, sides interleaved (toy stack)."""
    print("| seed | side | load 1-min | steps to 0.9 | wall s (spans) | CPU s (spans) | steps run |")
    print("|---|---|---|---|---|---|---|")
    for seed in (int(s) for s in a.seeds.split(",")):
        for side in ("trinity", "trl") if seed % 2 == 0 else ("trl", "trinity"):
            run = spawn(side, a, a.size, seed, a.max_steps, ["--stop-at-reward", "0.9"])
            hit = time_to_reward(run, 0.9)
            cells = f"{hit[0]} | {hit[1]:.1f} | {hit[2]:.1f}" if hit else "not reached | | "
            load = f"{run['load'][0]:.1f} -> {run['load'][1]:.1f}"
            print(f"| {seed} | {side} | {load} | {cells} | {len(run['steps'])} |", flush=True)


def main() -> None:
    """Parse arguments; run a side (``--child``) or drive the comparison."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", choices=["trinity", "trl"])
    p.add_argument("--stack", choices=["toy", "real"], default="toy")
    p.add_argument("--size", default="0.33M")
    p.add_argument("--sizes", default="0.33M,10M,40M")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompts", type=int, default=16, help="prompts per step (both sides)")
    p.add_argument("--group", type=int, default=16, help="responses per prompt (both sides)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of the medians")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="rows per micro-batch on both sides (0: the whole step); must divide prompts x group",
    )
    p.add_argument("--rss-profile", action="store_true", help="print each run's peak RSS by phase")
    p.add_argument("--reward-time", action="store_true")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--max-steps", type=int, default=1500)
    p.add_argument("--stop-at-reward", type=float, help=argparse.SUPPRESS)
    p.add_argument("--model-dir")
    p.add_argument("--data")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "trinity-bench-e2e"))
    p.add_argument("--trl-python", default=str(ROOT / ".venv-bench" / "bin" / "python"))
    a = p.parse_args()
    if a.micro_batch and (a.prompts * a.group) % a.micro_batch:
        p.error(f"--micro-batch {a.micro_batch} does not divide {a.prompts} x {a.group} rows")
    if a.child:
        child(a)
        return
    print(f"load at start: {os.getloadavg()[0]:.2f} (1-min average, {os.cpu_count()} cores)")
    if a.reward_time:
        reward_time(a)
        met = True
    else:
        met = per_step(a, a.sizes.split(","), Path(a.cache))
    print(f"load at end: {os.getloadavg()[0]:.2f}")
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
