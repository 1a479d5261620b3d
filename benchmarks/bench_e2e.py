"""End to end: ``trinity train`` against TRL 1.16 ``GRPOTrainer``, same model, tokenizer, prompts, reward,
group size, batch, learning rate and loss aggregation, on one torch thread.

TRL runs with ``loss_type="dapo"`` (token sum over the batch / tokens: trinity's token-mean),
``beta=0``, ``scale_rewards="group"``, no gradient checkpointing, ``bf16=False`` and one generation per
optimizer step (``steps_per_generation=1``, ``num_iterations=1``), its default optimizer. Each
measurement is a fresh process (peak RSS is the process's ``ru_maxrss``); the two sides alternate, and
the order flips every repetition, so load on the shared machine hits both alike.

Stacks: ``toy`` is the embedded default (last digit of a+b, character tokenizer, answers of 1-2 tokens);
``real`` a byte-level BPE tokenizer of 8192 tokens trained with ``tokenizers``, a Qwen2 folder written
with ``save_pretrained``, and a jsonl dataset of prompts of 4-48 tokens and answers up to 64 tokens.

    python benchmarks/bench_e2e.py --stack toy --sizes 0.33M --steps 12 --reps 2
    python benchmarks/bench_e2e.py --stack real --sizes 10M,40M --steps 6
    python benchmarks/bench_e2e.py --reward-time --seeds 0,1,2 --max-steps 300

The TRL side runs with ``--trl-python`` (default: ``.venv-bench/bin/python``, a venv that sees this one's
packages plus ``trl==1.16.*``; see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES: dict[str, dict[str, Any]] = {
    "0.33M": {},
    "10M": {"hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8},
    "40M": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 6, "num_attention_heads": 12},
}
"""Model configs over the default (hidden 128, 2 layers); key-value heads follow the attention heads."""
LR = 3e-4
REAL_VOCAB, REAL_ANSWER_TOKENS = 8192, 64


def _model_config(size: str) -> dict[str, Any]:
    cfg = dict(SIZES[size])
    if "num_attention_heads" in cfg:
        cfg["num_key_value_heads"] = cfg["num_attention_heads"]
    return cfg


# ---------------------------------------------------------------------------------------- the real stack


def _words(n: int, rng: random.Random) -> list[str]:
    syll = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + ["an", "el", "or", "is", "um"]
    return ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def build_real_stack(folder: Path, size: str) -> tuple[Path, Path]:
    """``(model folder, dataset jsonl)`` of the real stack at ``size`` under ``folder`` (made once)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config

    tok_dir, data = folder / "tokenizer", folder / "data.jsonl"
    rng = random.Random(0)
    vocab = _words(12000, rng)
    if not data.exists():
        rows = []
        for _ in range(2000):
            prompt = " ".join(rng.choice(vocab) for _ in range(rng.randint(3, 30)))
            answer = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 30)))
            rows.append({"prompt": prompt + " =>", "answer": answer})
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if not tok_dir.exists():
        corpus = [" ".join(rng.choice(vocab) for _ in range(20)) for _ in range(30000)]
        corpus += [json.loads(line)["prompt"] for line in data.read_text().splitlines()]
        core = Tokenizer(models.BPE())
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        core.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=REAL_VOCAB,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        core.train_from_iterator(corpus, trainer)
        tok = PreTrainedTokenizerFast(
            tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
        )
        tok.save_pretrained(tok_dir)
    model_dir = folder / f"model-{size}"
    if not model_dir.exists():
        tok = AutoTokenizer.from_pretrained(tok_dir)
        base = {
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
        }
        cfg = {**base, **_model_config(size)}
        cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
        config = Qwen2Config(
            vocab_size=len(tok),
            max_position_embeddings=256,
            tie_word_embeddings=True,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            **cfg,
        )
        import torch

        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
    return model_dir, data


# ---------------------------------------------------------------------------------------- the two sides


def run_trinity(a: argparse.Namespace) -> dict[str, Any]:
    """One ``trinity train`` run; per-step wall times, rewards and the profile's phase means."""
    from trinity_core.train import train

    config: dict[str, Any] = {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": a.group, "kl_loss_fn": "none"},
        "rollout": {"prompts_per_step": a.prompts, "temperature": 1.0},
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
        "model": {"model_path": None, "config": _model_config(a.size)},
    }
    if a.stack == "real":
        model_dir, data = Path(a.model_dir), Path(a.data)
        config["model"] = {"model_path": str(model_dir)}
        config["tasks"] = {"name": "dataset", "args": {"path": str(data)}, "reward_fns": ["exact_match"]}
        config["tasks"]["eval_size"] = 0
        config["rollout"]["max_new_tokens"] = REAL_ANSWER_TOKENS
    with tempfile.TemporaryDirectory() as tmp:
        result = train(config, run_dir=Path(tmp) / "run", profile=True)
    prof = result.profile or {}
    phases = {
        "generation": prof.get("generation_ms", 0.0),
        "forward_backward": prof.get("forward_backward_ms", 0.0) + prof.get("old_logprob_ms", 0.0),
        "optimizer": prof.get("optimizer_ms", 0.0),
    }
    return {
        "step_s": [h["time/step_s"] for h in result.history],
        "reward": [h["reward/mean"] for h in result.history],
        "phases_ms": phases,
    }


def _trl_rows(a: argparse.Namespace, tokenizer: Any) -> list[dict[str, Any]]:
    if a.stack == "real":
        return [json.loads(line) for line in Path(a.data).read_text().splitlines()]
    import torch

    from trinity_core import registry

    task = registry.create("task", "last_digit", {})
    rows = task.sample(a.prompts * a.steps, torch.Generator().manual_seed(a.seed))
    # trinity puts <bos> in front of every prompt; TRL tokenizes the text without special tokens.
    return [{"prompt": tokenizer.bos_token + r["prompt"], "answer": r["answer"]} for r in rows]


def run_trl(a: argparse.Namespace) -> dict[str, Any]:
    """One TRL ``GRPOTrainer`` run on the same stack; step times from callbacks, phases by wrapping."""
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
        model, tok = load_policy(None, None, _model_config(a.size), task.alphabet(), seed=a.seed)
        max_new = task.max_response_tokens()
    phases = dict.fromkeys(("generation", "forward", "backward", "optimizer"), 0.0)
    steps: list[float] = []
    rewards: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.t0 = time.perf_counter()

        def on_pre_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            phases["optimizer"] += time.perf_counter() - self.t_opt

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            steps.append(time.perf_counter() - self.t0)

        def on_log(self, *args: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                rewards.append(logs["reward"])

    def reward(prompts: list[str], completions: list[str], answer: list[str], **kw: Any) -> list[float]:
        return exact_match(prompts, completions, answer)

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp,
            per_device_train_batch_size=a.prompts * a.group,
            num_generations=a.group,
            gradient_accumulation_steps=1,
            steps_per_generation=1,
            num_iterations=1,
            max_completion_length=max_new,
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
            callbacks=[Clock()],
        )
        for name, attr, obj in (
            ("generation", "_generate_and_score_completions", trainer),
            ("forward", "compute_loss", trainer),
            ("backward", "backward", trainer.accelerator),
        ):
            setattr(obj, attr, _timed(phases, name, getattr(obj, attr)))
        trainer.train()
    n = max(len(steps), 1)
    fb = (phases["forward"] + phases["backward"]) * 1000 / n
    out = {"generation": phases["generation"] * 1000 / n, "forward_backward": fb}
    out["optimizer"] = phases["optimizer"] * 1000 / n
    return {"step_s": steps, "reward": rewards, "phases_ms": out}


def _timed(phases: dict[str, float], name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            phases[name] += time.perf_counter() - start

    return wrapper


# ---------------------------------------------------------------------------------------- the driver


def child(a: argparse.Namespace) -> None:
    """Run one side in this process and print its JSON line (peak RSS included)."""
    import torch

    torch.set_num_threads(1)
    out = run_trinity(a) if a.child == "trinity" else run_trl(a)
    out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out))


def spawn(
    side: str, a: argparse.Namespace, size: str, seed: int, steps: int, extra: list[str]
) -> dict[str, Any]:
    """One side in a fresh process (TRL's with ``--trl-python``)."""
    python = a.trl_python if side == "trl" else sys.executable
    cmd = [python, __file__, "--child", side, "--size", size, "--seed", str(seed), "--steps", str(steps)]
    cmd += ["--stack", a.stack, "--prompts", str(a.prompts), "--group", str(a.group), *extra]
    cmd += ["--micro-batch", str(a.micro_batch)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"{side} failed:\n{proc.stderr[-4000:]}")
    return json.loads(line[len("RESULT ") :])


def time_to_reward(run: dict[str, Any], target: float, window: int = 5) -> float:
    """Seconds until the mean reward of the last ``window`` steps first reaches ``target`` (inf: never)."""
    elapsed, rewards = 0.0, run["reward"]
    for i, seconds in enumerate(run["step_s"]):
        elapsed += seconds
        if i + 1 >= window and statistics.fmean(rewards[i + 1 - window : i + 1]) >= target:
            return elapsed
    return float("inf")


def per_step(a: argparse.Namespace, sizes: list[str], folder: Path) -> None:
    """Median ms per step (first steps dropped), phase split and peak RSS, sides interleaved."""
    print(f"load at start: {os.getloadavg()[0]:.2f} (1-min average, {os.cpu_count()} cores)")
    print(
        f"{a.prompts} prompts x {a.group} responses per step, {a.steps} steps per run, "
        f"{a.reps} runs per side, "
        f"trinity micro_batch_size {a.micro_batch or None}"
    )
    print("| stack | size | side | ms/step (median) | generation | fwd+bwd | optimizer | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        extra: list[str] = []
        if a.stack == "real":
            model_dir, data = build_real_stack(folder, size)
            extra = ["--model-dir", str(model_dir), "--data", str(data)]
        runs: dict[str, list[dict[str, Any]]] = {"trinity": [], "trl": []}
        for rep in range(a.reps):
            for side in ("trinity", "trl") if rep % 2 == 0 else ("trl", "trinity"):
                runs[side].append(spawn(side, a, size, 0, a.steps, extra))
        med = {}
        for side, rs in runs.items():
            times = [t for r in rs for t in r["step_s"][a.warmup :]]
            med[side] = 1000 * statistics.median(times)
            ph = {k: statistics.fmean(r["phases_ms"][k] for r in rs) for k in rs[0]["phases_ms"]}
            rss = max(r["rss_mib"] for r in rs)
            print(
                f"| {a.stack} | {size} | {side} | {med[side]:.1f} | {ph['generation']:.1f} | "
                f"{ph['forward_backward']:.1f} | {ph['optimizer']:.1f} | {rss:.0f} |"
            )
        print(f"| {a.stack} | {size} | TRL/trinity | {med['trl'] / med['trinity']:.2f}x | | | | |")
    print(f"load at end: {os.getloadavg()[0]:.2f}")


def reward_time(a: argparse.Namespace) -> None:
    """Time to mean reward 0.9 (5-step window) per seed, sides interleaved (default size, toy stack)."""
    print("| seed | trinity s (steps) | TRL s (steps) | trinity final reward | TRL final reward |")
    print("|---|---|---|---|---|")
    for seed in (int(s) for s in a.seeds.split(",")):
        cells, finals = {}, {}
        for side in ("trinity", "trl") if seed % 2 == 0 else ("trl", "trinity"):
            run = spawn(side, a, "0.33M", seed, a.max_steps, [])
            t = time_to_reward(run, 0.9)
            steps = next((i + 1 for i in range(len(run["step_s"])) if sum(run["step_s"][: i + 1]) >= t), None)
            cells[side] = f"{t:.1f} ({steps})" if steps else "not reached"
            finals[side] = statistics.fmean(run["reward"][-50:])  # mean of the last 50 steps
        rewards = f"{finals['trinity']:.3f} | {finals['trl']:.3f}"
        print(f"| {seed} | {cells['trinity']} | {cells['trl']} | {rewards} |")


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
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of the median")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="trinity's trainer.micro_batch_size (0: whole batch); the group size G cuts a step into "
        "one prompt's rows per micro-batch, each trimmed to its own widths (same loss)",
    )
    p.add_argument("--reward-time", action="store_true")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--model-dir")
    p.add_argument("--data")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "trinity-bench-e2e"))
    p.add_argument("--trl-python", default=str(ROOT / ".venv-bench" / "bin" / "python"))
    a = p.parse_args()
    if a.child:
        child(a)
    elif a.reward_time:
        reward_time(a)
    else:
        folder = Path(a.cache)
        folder.mkdir(parents=True, exist_ok=True)
        per_step(a, a.sizes.split(","), folder)


if __name__ == "__main__":
    main()
