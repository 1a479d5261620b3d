"""The explorer alone: tokens per second of trinity's ``generate`` against TRL 1.16's generation, on the
same prompts, model and sampling settings; and what transformers offers for it (issue 31).

Variants (each its own copy of the model, called in turn, the order reversed every round):

* ``trinity``: :func:`trinity_core.lm.sampling.generate` as the explorer calls it (each prompt prefilled
  once, its key-value cache repeated for its ``G`` rows; ``DynamicCache``);
* ``trinity-static``: the same with the model's ``generation_config.cache_implementation = "static"``
  (transformers' ``StaticCache``: preallocated, no growth; the shared prefill steps aside for it);
* ``trinity-static-compile``: and ``torch.compile`` of the decoding step through ``generate``'s own
  ``CompileConfig`` (the first call, which compiles, is timed apart);
* ``cb``: transformers' continuous batching ``generate_batch`` (paged attention; finished requests leave
  the batch). It cannot ban end-of-sequence for the first ``min_new_tokens`` tokens (it drops
  ``MinNewTokensLengthLogitsProcessor``), so it samples another distribution: measured, not a candidate;
* ``trl``: ``GRPOTrainer._generate`` of a trainer built as ``bench_e2e.py`` builds it (its
  ``GenerationConfig``, left-padded repeated prompts, ``generate``, the cut at EOS, decoding).

Tokens are the response tokens up to and including each row's first EOS. Figures: median wall and
process CPU seconds per call, tokens per wall second and per CPU second (the CPU figure is the one to
read on a shared machine). Run with the bench venv's python (TRL):

    .venv-bench/bin/python benchmarks/bench_generation.py --sizes 10M,40M --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_stack import REAL_ANSWER_TOKENS, build_real_stack

MIN_NEW_TOKENS = 1
VARIANTS = "trinity, trinity-static, trinity-static-compile, cb, trl"
Call = Callable[[], int]
"""One generation call; returns the tokens generated."""


def _load(model_dir: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)


def trinity_call(model_dir: Path, prompts: list[str], group: int, cache: str | None, compiled: bool) -> Call:
    """trinity's explorer ``generate`` (optionally with a static cache and a compiled decoding step)."""
    from transformers import CompileConfig

    from trinity_core.lm.sampling import generate

    model, tok = _load(model_dir)
    if cache is not None:
        model.generation_config.cache_implementation = cache
    if compiled:
        model.generation_config.compile_config = CompileConfig(fullgraph=False, dynamic=None)
        model.generation_config.compile_config._compile_all_devices = True

    def call() -> int:
        out = generate(
            model,
            tok,
            prompts,
            repeat=group,
            max_new_tokens=REAL_ANSWER_TOKENS,
            temperature=1.0,
            min_new_tokens=MIN_NEW_TOKENS,
        )
        return int(out.response_lengths.sum())

    return call


def cb_call(model_dir: Path, prompts: list[str], group: int) -> Call:
    """transformers' continuous batching (``generate_batch``) on the same prompts, ``G`` requests each."""
    from transformers import GenerationConfig

    model, tok = _load(model_dir)
    model.eval()
    config = GenerationConfig(
        max_new_tokens=REAL_ANSWER_TOKENS,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    ids = [list(r) for r in tok([p for p in prompts for _ in range(group)])["input_ids"]]

    def call() -> int:
        out = model.generate_batch(inputs=ids, generation_config=config, progress_bar=False, warmup=False)
        return sum(len(o.generated_tokens) for o in out.values())

    return call


def trl_call(model_dir: Path, data: Path, prompts: list[str], group: int) -> Call:
    """TRL's generation: ``GRPOTrainer._generate`` of the trainer ``bench_e2e.py`` builds."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tok = _load(model_dir)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=group,
        num_generations=group,
        max_completion_length=REAL_ANSWER_TOKENS,
        generation_kwargs={"min_new_tokens": MIN_NEW_TOKENS},
        temperature=1.0,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
    )
    repeated = [p for p in prompts for _ in range(group)]

    def call() -> int:
        completion_ids = trainer._generate(repeated)[1]
        return sum(len(c) for c in completion_ids)

    return call


def make_call(variant: str, model_dir: Path, data: Path, prompts: list[str], group: int) -> Call:
    """The call of ``variant`` (see the module docstring)."""
    if variant == "trinity":
        return trinity_call(model_dir, prompts, group, None, False)
    if variant == "trinity-static":
        return trinity_call(model_dir, prompts, group, "static", False)
    if variant == "trinity-static-compile":
        return trinity_call(model_dir, prompts, group, "static", True)
    if variant == "cb":
        return cb_call(model_dir, prompts, group)
    if variant == "trl":
        return trl_call(model_dir, data, prompts, group)
    sys.exit(f"unknown variant {variant!r}; pick from {VARIANTS}")


def measure(calls: dict[str, Call], rounds: int) -> dict[str, list[tuple[float, float, int]]]:
    """``(wall s, CPU s, tokens)`` per call and variant, a warm-up call first (its figures kept apart)."""
    import torch

    out: dict[str, list[tuple[float, float, int]]] = {k: [] for k in calls}
    first: dict[str, list[tuple[float, float, int]]] = {k: [] for k in calls}
    names = list(calls)
    for r in range(rounds + 1):
        for name in names if r % 2 == 0 else names[::-1]:
            torch.manual_seed(r)
            wall, cpu = time.perf_counter(), time.process_time()
            tokens = calls[name]()
            (first if r == 0 else out)[name].append(
                (time.perf_counter() - wall, time.process_time() - cpu, tokens)
            )
    for name, runs in first.items():
        out[f"{name} (first call)"] = runs
    return out


def main() -> None:
    """Build the stacks, time every variant, print one table per size."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10M,40M")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default="trinity,trinity-static,trl")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "trinity-bench-e2e"))
    a = p.parse_args()
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    print(f"load at start: {os.getloadavg()[0]:.2f} (1-min average, {os.cpu_count()} cores)")
    print(f"{a.prompts} prompts x {a.group} responses, up to {REAL_ANSWER_TOKENS} new tokens, one thread")
    for size in a.sizes.split(","):
        model_dir, data = build_real_stack(Path(a.cache), size)
        rows = [json.loads(line) for line in data.read_text().splitlines()]
        prompts = [r["prompt"] for r in rows[: a.prompts]]
        calls = {v: make_call(v, model_dir, data, prompts, a.group) for v in a.variants.split(",")}
        load0 = os.getloadavg()[0]
        results = measure(calls, a.rounds)
        print(f"\n{size} (load {load0:.1f} -> {os.getloadavg()[0]:.1f})")
        print("| variant | calls | tokens/call | s/call wall | s/call CPU | tokens/s wall | tokens/s CPU |")
        print("|---|---|---|---|---|---|---|")
        for name, runs in results.items():
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            tokens = statistics.fmean(r[2] for r in runs)
            print(
                f"| {name} | {len(runs)} | {tokens:.0f} | {wall:.2f} | {cpu:.2f} | "
                f"{tokens / wall:.0f} | {tokens / cpu:.0f} |"
            )
    print(f"\nload at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
