"""Peak memory and time of one training step under the memory settings of ``trinity train``.

Run: ``python benchmarks/bench_memory.py`` (``--steps N`` timed steps, default 1; ``--threads N``).

A ~20M-parameter Qwen2 built from a config (hidden 384, 9 layers, 6 heads / 2 KV heads, MLP 1280,
vocabulary 8192, tied embeddings) takes one learner step (the no-grad reference pass of the KL term, then
forward, backward, AdamW) on a fixed batch of 4 rows of 32 prompt + 96 response tokens, with the GRPO
loss and a k3 KL loss on, so the reference policy is in memory in every configuration:

* fp32: ``trainer.mixed_precision: no`` (the reference is a frozen copy of the policy);
* bf16: ``mixed_precision: bf16`` (Accelerate's autocast; weights stay float32);
* bf16 + gc: and ``trainer.gradient_checkpointing: true``;
* bf16 + gc + LoRA: and ``model.lora`` (r 16 on every linear layer; the reference is the same model with
  its adapters disabled: no copy, and the optimizer holds the adapters only).

Each configuration runs in a fresh process. Memory on CPU is the process's peak RSS (``ru_maxrss``);
"added" is that peak minus the RSS after the imports, i.e. what the model, optimizer and step need; on
CUDA it is ``torch.cuda.max_memory_allocated``. Time is the median ms of ``--steps`` steps after one
warm-up step. Target: bf16 + gc + LoRA at most 40% of fp32's added peak. Exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import resource
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
    "max_position_embeddings": 512,
}
ROWS, PROMPT, RESPONSE = 4, 32, 96
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
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def child(name: str, steps: int, threads: int) -> dict[str, Any]:
    """Build the trainer of configuration ``name`` and time its steps; return the measurements."""
    import torch

    from trinity_core.config import resolve_config
    from trinity_core.train.loop import Trainer
    from trinity_core.train.run import make_accelerator, prepare_run_dir
    from trinity_core.train.update import response_logprobs

    base = rss_mib()
    extra = CONFIGS[name]
    data = {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "k3"},
        "rollout": {"prompts_per_step": 1},
        "tasks": {"eval_size": 0},
        "trainer": {"progress": False, "threads": threads, "checkpoint_every": 0, **extra.get("trainer", {})},
        "model": {"config": MODEL, **extra.get("model", {})},
    }
    config = resolve_config(data)
    run_dir = Path(tempfile.mkdtemp()) / "run"
    acc = make_accelerator(config, run_dir)
    prepare_run_dir(run_dir, config, resume=False, overwrite=True, is_main=True)
    trainer = Trainer(config, run_dir, accelerator=acc)
    learner = trainer.learner
    params = sum(p.numel() for n, p in learner.policy.named_parameters() if "lora_" not in n)
    trainable = sum(p.numel() for p in learner.policy.parameters() if p.requires_grad)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, MODEL["vocab_size"], (ROWS, PROMPT + RESPONSE), generator=gen).to(acc.device)
    mask = torch.ones(ROWS, RESPONSE, dtype=torch.bool, device=acc.device)
    advantages = torch.randn(ROWS, RESPONSE, generator=gen).to(acc.device)
    cuda = acc.device.type == "cuda"

    def step() -> None:
        with torch.no_grad():
            ref = response_logprobs(learner.ref, ids, None, PROMPT, False)[0]
        columns = {"action_mask": mask, "advantages": advantages, "ref_logprob": ref}
        learner.update(ids, None, PROMPT, columns, ROWS)
        if cuda:
            torch.cuda.synchronize()

    step()  # warm-up: allocator, optimizer state
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    out = {
        "name": name,
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
    parser.add_argument("--steps", type=int, default=1, help="timed steps per configuration")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child(ns.child, ns.steps, ns.threads)))
        return 0
    rows = []
    for name in CONFIGS:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            name,
            "--steps",
            str(ns.steps),
            "--threads",
            str(ns.threads),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    fp32 = rows[0]["added_mib"]
    print(machine_line())
    print(
        f"\nQwen2 {rows[0]['params'] / 1e6:.1f}M parameters, {ROWS} rows x ({PROMPT} + {RESPONSE}) tokens, "
        "GRPO + k3 KL loss, AdamW, one step\n"
    )
    print("| configuration | trainable | peak RSS | added peak | vs fp32 | ms / step |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['name']} | {row['trainable'] / 1e6:.2f}M | {row['peak_mib']:.0f} MiB | "
            f"{row['added_mib']:.0f} MiB | {row['added_mib'] / fp32:.0%} | {row['ms']:.0f} |"
        )
    ratio = rows[-1]["added_mib"] / fp32
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"\nbf16 + gc + LoRA: {ratio:.0%} of fp32's added peak (target <= {TARGET:.0%}): {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
