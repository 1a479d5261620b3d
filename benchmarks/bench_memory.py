"""Peak memory and time of one training step under the memory settings of ``trinity train``.

Run: ``python benchmarks/bench_memory.py`` (``--batch short|long|both``, default both; ``--steps N`` timed
steps, default 1; ``--threads N``).

A ~20M-parameter Qwen2 built from a config (hidden 384, 9 layers, 6 heads / 2 KV heads, MLP 1280,
vocabulary 8192, tied embeddings) takes one learner step (the no-grad reference pass of the KL term, then
forward, backward, AdamW) on a fixed batch of 4 rows, ``short`` 32 prompt + 96 response tokens (512
tokens) or ``long`` 64 + 448 (2048 tokens, where activations matter), with the GRPO loss and a k3 KL loss
on, so the reference policy is in memory in every configuration:

* fp32: ``trainer.mixed_precision: no`` (the reference is a frozen copy of the policy);
* bf16: ``mixed_precision: bf16`` (Accelerate's autocast; weights stay float32);
* bf16 + gc: and ``trainer.gradient_checkpointing: true``;
* bf16 + gc + LoRA: and ``model.lora`` (r 16 on every linear layer; the reference is the same model with
  its adapters disabled: no copy, and the optimizer holds the adapters only; ``model.dtype: auto`` keeps
  the frozen base in bf16, the adapters and their AdamW state float32).

Each configuration and batch runs in a fresh process, which first builds and steps a tiny model of the
same architecture and settings (1 layer, hidden 64), so that the first-use costs of the modeling code,
PEFT and the kernels are in the baseline, not in the measurement. Memory on CPU: "added" is the peak RSS
after that baseline (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``) minus the baseline RSS,
i.e. what the model, optimizer and step need; on CUDA it is ``torch.cuda.max_memory_allocated`` after a
reset. Time is the median ms of ``--steps`` steps after one warm-up step. Target: bf16 + gc + LoRA at
most 40% of fp32's added peak at each batch. Exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line

MODEL = {
    "hidden_size": 384,
    "intermediate_size": 1280,
    "num_hidden_layers": 9,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "vocab_size": 8192,
    "max_position_embeddings": 1024,
}
WARMUP_MODEL = {
    **MODEL,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
}
BATCHES = {"short": (4, 32, 96), "long": (4, 64, 448)}
"""Rows, prompt tokens, response tokens."""
CONFIGS: dict[str, dict[str, Any]] = {
    "fp32": {},
    "bf16": {"trainer": {"mixed_precision": "bf16"}},
    "bf16 + gc": {"trainer": {"mixed_precision": "bf16", "gradient_checkpointing": True}},
    "bf16 + gc + LoRA": {
        "trainer": {"mixed_precision": "bf16", "gradient_checkpointing": True},
        "model": {"lora": {"r": 16, "alpha": 32}},
    },
}
TARGET = 0.40


def rss_mib() -> float:
    """The current resident set size in MiB (Linux ``/proc``)."""
    return _status_kib("VmRSS") / 1024


def reset_peak() -> None:
    """Start a new peak RSS from the current RSS (Linux >= 4.0: ``5`` to ``clear_refs`` resets VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_mib() -> float:
    """The peak RSS in MiB since the last :func:`reset_peak`."""
    return _status_kib("VmHWM") / 1024


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def make_step(name: str, model: dict[str, Any], batch: str, threads: int) -> tuple[Any, Any]:
    """``(trainer, step)``: the trainer of configuration ``name`` over ``model`` and one step of it."""
    import torch

    from trinity_core.config import resolve_config
    from trinity_core.train.learner.logprobs import response_logprobs
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.run import make_accelerator, prepare_run_dir

    extra = CONFIGS[name]
    data = {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "k3"},
        "rollout": {"prompts_per_step": 1},
        "tasks": {"eval_size": 0},
        "trainer": {"progress": False, "threads": threads, "checkpoint_every": 0, **extra.get("trainer", {})},
        "model": {"config": model, **extra.get("model", {})},
    }
    config = resolve_config(data)
    run_dir = Path(tempfile.mkdtemp()) / "run"
    acc = make_accelerator(config, run_dir)
    prepare_run_dir(run_dir, config, resume=False, overwrite=True, is_main=True)
    trainer = Runner(config, run_dir, accelerator=acc)
    learner = trainer.learner
    rows, prompt, response = BATCHES[batch]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model["vocab_size"], (rows, prompt + response), generator=gen).to(acc.device)
    mask = torch.ones(rows, response, dtype=torch.bool, device=acc.device)
    advantages = torch.randn(rows, response, generator=gen).to(acc.device)
    cuda = acc.device.type == "cuda"

    def step() -> None:
        with torch.no_grad():
            ref = response_logprobs(learner.ref, ids, None, prompt, False)[0]
        columns = {"action_mask": mask, "advantages": advantages, "ref_logprob": ref}
        learner.update(ids, None, prompt, columns, rows)
        if cuda:
            torch.cuda.synchronize()

    return trainer, step


def child(name: str, batch: str, steps: int, threads: int) -> dict[str, Any]:
    """Warm up on a tiny model, then build the trainer of configuration ``name`` and measure its steps."""
    import torch

    tiny, tiny_step = make_step(name, WARMUP_MODEL, "short", threads)
    tiny_step()
    tiny.event_loop.close()
    del tiny, tiny_step
    gc.collect()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    base = rss_mib()
    reset_peak()

    trainer, step = make_step(name, MODEL, batch, threads)
    learner = trainer.learner
    params = sum(p.numel() for n, p in learner.policy.named_parameters() if "lora_" not in n)
    trainable = sum(p.numel() for p in learner.policy.parameters() if p.requires_grad)
    step()  # warm-up: allocator, optimizer state
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = peak_mib()
    out = {
        "name": name,
        "batch": batch,
        "params": params,
        "trainable": trainable,
        "ms": 1000 * statistics.median(times),
        "base_mib": base,
        "peak_mib": peak,
        "added_mib": peak - base,
    }
    if cuda:
        out["added_mib"] = out["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    trainer.event_loop.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", choices=[*BATCHES, "both"], default="both", help="batch setting")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per configuration")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    batches = list(BATCHES) if ns.batch == "both" else [ns.batch]
    if ns.child:
        print(json.dumps(child(ns.child, batches[0], ns.steps, ns.threads)))
        return 0
    print(machine_line())
    met = True
    for batch in batches:
        rows = []
        for name in CONFIGS:
            cmd = [sys.executable, __file__, "--child", name, "--batch", batch]
            cmd += ["--steps", str(ns.steps), "--threads", str(ns.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode:
                sys.exit(f"{name} ({batch}) failed:\n{proc.stderr[-3000:]}")
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        met = report(batch, rows) and met
    return 0 if met else 1


def report(batch: str, rows: list[dict[str, Any]]) -> bool:
    """Print the table of one batch setting; whether its target is met."""
    n, prompt, response = BATCHES[batch]
    fp32 = rows[0]["added_mib"]
    print(
        f"\n{batch}: Qwen2 {rows[0]['params'] / 1e6:.1f}M parameters, {n} rows x ({prompt} + {response}) "
        "tokens, GRPO + k3 KL loss, AdamW, one step\n"
    )
    print("| configuration | trainable | baseline RSS | peak RSS | added peak | vs fp32 | ms / step |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['name']} | {row['trainable'] / 1e6:.2f}M | {row['base_mib']:.0f} MiB | "
            f"{row['peak_mib']:.0f} MiB | {row['added_mib']:.0f} MiB | {row['added_mib'] / fp32:.0%} | "
            f"{row['ms']:.0f} |"
        )
    ratio = rows[-1]["added_mib"] / fp32
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"\n{batch}: bf16 + gc + LoRA {ratio:.0%} of fp32's added peak (target <= {TARGET:.0%}): {verdict}")
    return ratio <= TARGET


if __name__ == "__main__":
    raise SystemExit(main())
