"""Tool use learned end to end, offline: an SFT warm start on written transcripts, then RL with the tools
workflow, on products of 3- and 4-digit numbers with a ``multiply`` tool.

Run: ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_tools.py`` (3 seeds; ``--quick`` runs
every phase briefly, no result).

Per seed, on one torch thread, with a ~332K-parameter Qwen2 built from a config (hidden 128, 2 layers,
the embedded default's shape) and a character tokenizer over printable ASCII:

1. **Transcripts.** ``--transcripts`` problems of the ``multiplication`` task, each played by a scripted
   expert through the ``tools`` workflow itself (the engine replies with the correct Hermes call, then
   with the tool's result), so each stored ``multi_turn`` experience has exactly the tokens and the
   action mask a real episode has: the expert's replies learned, the tool's answers masked out.
2. **SFT.** ``trinity train`` (in-process) with ``mode: train`` and the ``sft`` preset on them, 32
   transcripts a step, lr 1e-3, in chunks of ``--sft-chunk`` steps (each continuing the run with
   ``--resume``) until the greedy success on ``--validation`` problems (drawn apart from the held-out
   ones) reaches ``--warm-start``: a warm start that writes the call format and copies the digits (into
   the call, and from the tool's answer) only sometimes. The model learns the format within 100 steps
   and the copying suddenly, at a step that depends on the seed, so a fixed step count would start RL
   from 0% on one seed and from 99% on another.
3. **RL.** ``trinity train`` with the ``grpo`` preset (8 problems x 8 episodes a step, lr ``--rl-lr``,
   no KL) and ``rollout.workflow: tools`` from the SFT model, ``--rl-steps`` steps, rewarded by
   ``exact_match`` on the final answer.
4. **Evaluation** on ``--eval`` held-out problems, greedy: the success rate (exact answer) of (a) the
   SFT model and (b) the RL model with the ``multiply`` tool, and (c) the RL model without tools
   (``tools: []``: its call is answered "unknown tool"), with calls per episode.

The chat template is a compact one that names the tools (``tools: multiply``) instead of rendering
their 260-character JSON schemas (the shipped ``tools`` template), which would triple the length of
every sequence of this tiny model. Each phase writes its result under ``--work`` and is skipped when run
again (resumable: a killed run continues with the next unfinished phase). Prints a Markdown table with
steps, seconds and the machine's load; exits 1 when RL does not raise the mean success over the SFT
start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from trinity_plugin_tools import HermesParser, MultiplicationTask, ToolsWorkflow
from trinity_plugin_tools.templates import MESSAGES_TEMPLATE

from trinity_core.buffer import make_buffer
from trinity_core.components import ToolCall
from trinity_core.testing.scripted import ScriptedEngine
from trinity_core.train import train
from trinity_core.train.models.policy import build_char_tokenizer
from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks

ROOT = Path(__file__).resolve().parents[1]
MODEL = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 512,
}
TEMPLATE = (
    "{%- if tools %}{{ 'tools: ' + (tools | map(attribute='function') | map(attribute='name') | join(', '))"
    " + '\\n' }}{% endif %}" + MESSAGES_TEMPLATE
)
"""The compact template: the tools named on one line, then Qwen2.5's layout (see the module doc)."""
MAX_NEW_TOKENS = 96
TOOLS = ["trinity_plugin_tools.multiply"]


def workflow_args(template: Path, tools: list[str]) -> dict[str, Any]:
    """The tools workflow's arguments: two replies (call, answer), one call."""
    return {"tools": tools, "chat_template": str(template), "max_turns": 2, "max_tool_calls": 1}


def expert(prompt: str) -> str:
    """The scripted expert: the right call, then the tool's answer."""
    if "<tool_response>" in prompt:
        return prompt.rsplit("<tool_response>", 1)[1].split("</tool_response>", 1)[0]
    match = re.search(r"<user>(\d+)\*(\d+)</user>", prompt)
    assert match is not None, prompt
    return HermesParser().format([ToolCall("multiply", {"a": int(match[1]), "b": int(match[2])})])


def exact(row: dict[str, Any]) -> Any:
    """The reward of a row's episodes: 1 for the exact answer."""
    return lambda completions, ids, truncated: [float(c == row["answer"]) for c in completions]


def episodes(engine: Any, rows: list[dict[str, Any]], args: dict[str, Any]) -> Any:
    """One episode per row through the explorer's runner."""
    runner = WorkflowRunner("tools", ToolsWorkflow, args, engine, max_calls=8)
    tasks = make_tasks(ToolsWorkflow, rows, step=0, task_offset=0, repeat_times=1)
    for task in tasks:
        task.reward_fn = exact(task.raw_task)
    return runner.run(tasks)


def write_transcripts(folder: Path, count: int, seed: int, args: dict[str, Any]) -> None:
    """``count`` expert episodes as a disk buffer of multi_turn experiences."""
    tokenizer = build_char_tokenizer(MultiplicationTask().alphabet())
    rows = MultiplicationTask().sample(count, torch.Generator().manual_seed(10_000 + seed))
    engine = ScriptedEngine(tokenizer, expert, {"max_new_tokens": MAX_NEW_TOKENS})
    outcome = episodes(engine, rows, args)
    assert not outcome.failures, outcome.failures[:1]
    assert all(e.reward == 1.0 for e in outcome.experiences), "the expert failed a problem"
    writer, _ = make_buffer("disk", folder)
    asyncio.run(writer.write(outcome.experiences))


def sft_config(data: Path, steps: int, seed: int, checkpoint_every: int = 0) -> dict[str, Any]:
    """The SFT warm start: the sft preset in mode train on the transcripts."""
    return {
        "mode": "train",
        "algorithm": {"algorithm_type": "sft"},
        "tasks": {"name": "multiplication", "eval_size": 0},
        "data": {"experiences": str(data), "batch_size": 32},
        "model": {"config": MODEL},
        "trainer": {
            "total_steps": steps,
            "lr": 1e-3,
            "warmup_steps": 10,
            "seed": seed,
            "threads": 1,
            "checkpoint_every": checkpoint_every,
            "keep_checkpoints": 1,
            "progress": False,
            "log_samples_every": 0,
        },
    }


def tokenizer_folder(model: Path) -> Path:
    """A folder with ``model``'s tokenizer files alone.

    Loaded from the model folder itself, ``AutoTokenizer`` (transformers 5) follows ``config.json``'s
    ``model_type`` to ``Qwen2Tokenizer``, which drops the spaces and newlines of the character
    vocabulary; without ``config.json`` beside them it loads the saved tokenizer as it was.
    """
    folder = model.parent / "tokenizer"
    folder.mkdir(exist_ok=True)
    for path in model.glob("tokenizer*"):
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def rl_config(model: Path, steps: int, seed: int, args: dict[str, Any]) -> dict[str, Any]:
    """RL from the SFT model: grpo, the tools workflow, exact_match on the final answer."""
    return {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 8, "kl_loss_fn": "none"},
        "tasks": {"name": "multiplication", "eval_size": 0},
        "rollout": {
            "prompts_per_step": 8,
            "max_new_tokens": MAX_NEW_TOKENS,
            "workflow": "tools",
            "workflow_args": args,
        },
        "model": {"model_path": str(model), "tokenizer_path": str(tokenizer_folder(model))},
        "trainer": {
            "total_steps": steps,
            "lr": 5e-5,  # --rl-lr
            "seed": seed,
            "threads": 1,
            "checkpoint_every": 0,
            "progress": False,
            "log_samples_every": 0,
        },
    }


def evaluate(model_dir: Path, rows: list[dict[str, Any]], args: dict[str, Any]) -> dict[str, float]:
    """Greedy success rate and calls per episode of the model in ``model_dir`` on ``rows``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    defaults = {
        "max_new_tokens": MAX_NEW_TOKENS,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "greedy": True,
    }
    outcome = episodes(GenerationEngine(model, tokenizer, defaults), rows, args)
    assert not outcome.failures, outcome.failures[:1]
    metrics = outcome.metrics()
    success = sum(e.reward for e in outcome.experiences) / len(rows)
    return {"success": success, "calls_per_episode": metrics["tools/calls_per_episode"]}


def load() -> list[str]:
    """The machine's load average over 1, 5 and 15 minutes (other work shares the cores)."""
    path = Path("/proc/loadavg")
    return path.read_text().split()[:3] if path.exists() else ["?"] * 3


def phase(path: Path, make: Any) -> dict[str, Any]:
    """The result stored at ``path``, or ``make()``'s, stored there (so a second run resumes)."""
    if path.is_file():
        return dict(json.loads(path.read_text()))
    result = dict(make())
    path.write_text(json.dumps(result))
    return result


def warm_start(
    root: Path, data: Path, seed: int, ns: argparse.Namespace, validation: list[dict[str, Any]], args: Any
) -> dict[str, Any]:
    """SFT in chunks of ``--sft-chunk`` steps (each continuing the run with ``--resume``) until the model
    solves ``--warm-start`` of the validation problems, greedy; its progress is kept in
    ``sft-progress.json``, so a killed run continues from the last chunk."""
    run_dir, log = root / "sft", root / "sft-progress.json"
    progress = (
        json.loads(log.read_text()) if log.is_file() else {"steps": 0, "seconds": 0.0, "validation": []}
    )
    while progress["steps"] < ns.sft_max_steps and not (
        progress["validation"] and progress["validation"][-1][1] >= ns.warm_start
    ):
        steps = progress["steps"] + ns.sft_chunk
        start = time.perf_counter()
        latest = run_dir / "checkpoints" / "latest"
        if progress["steps"] == 0:
            train(sft_config(data, steps, seed, ns.sft_chunk), run_dir=run_dir, overwrite=True)
        elif not (latest.is_file() and latest.read_text().strip() == f"step-{steps:06d}"):
            train(resume=run_dir, overrides=[f"trainer.total_steps={steps}"])
        progress["seconds"] += time.perf_counter() - start
        success = evaluate(run_dir / "model", validation, args)["success"]
        progress["steps"] = steps
        progress["validation"].append([steps, success])
        log.write_text(json.dumps(progress))
    return {**progress, "load": load()[0]}


def run_seed(seed: int, work: Path, ns: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The four phases of one seed; each stores its result in ``work/seed-<seed>``."""
    root = work / f"seed-{seed}"
    root.mkdir(parents=True, exist_ok=True)
    template = root / "compact.jinja"
    template.write_text(TEMPLATE)
    with_tools, without = workflow_args(template, TOOLS), workflow_args(template, [])

    def timed_train(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
        start = time.perf_counter()
        result = train(config, run_dir=run_dir, overwrite=True)

        def reward(rows: list[dict[str, float]]) -> float:
            return statistics.fmean(h.get("reward/mean", math.nan) for h in rows) if rows else math.nan

        return {
            "seconds": time.perf_counter() - start,
            "steps": result.steps,
            "first_reward": reward(result.history[:10]),
            "last_reward": reward(result.history[-10:]),
            "load": load()[0],
        }

    data = root / "transcripts"
    phase(root / "transcripts.json", lambda: write_transcripts(data, ns.transcripts, seed, with_tools) or {})
    validation = MultiplicationTask().sample(ns.validation, torch.Generator().manual_seed(424_242))
    sft = phase(root / "sft.json", lambda: warm_start(root, data, seed, ns, validation, with_tools))
    rl_run = rl_config(root / "sft" / "model", ns.rl_steps, seed, with_tools)
    rl_run["trainer"]["lr"] = ns.rl_lr
    rl_run["rollout"]["temperature"] = ns.rl_temperature
    rl = phase(root / "rl.json", lambda: timed_train(rl_run, root / "rl"))
    scores = phase(
        root / "eval.json",
        lambda: {
            "sft": evaluate(root / "sft" / "model", rows, with_tools),
            "rl": evaluate(root / "rl" / "model", rows, with_tools),
            "rl_without_tools": evaluate(root / "rl" / "model", rows, without),
        },
    )
    return {"seed": seed, "sft_train": sft, "rl_train": rl, **scores}


def main() -> int:
    """Run every seed (resuming finished phases), print the table; exit 1 when RL does not help."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench_tools")
    parser.add_argument("--transcripts", type=int, default=4096)
    parser.add_argument("--sft-chunk", type=int, default=50, help="SFT steps between validations")
    parser.add_argument("--sft-max-steps", type=int, default=1000)
    parser.add_argument("--warm-start", type=float, default=0.4, help="validation success that ends SFT")
    parser.add_argument("--validation", type=int, default=64, help="validation problems (not held out)")
    parser.add_argument("--rl-steps", type=int, default=60)
    parser.add_argument("--rl-lr", type=float, default=5e-5)
    parser.add_argument("--rl-temperature", type=float, default=1.0, help="sampling temperature of RL")
    parser.add_argument("--eval", type=int, default=200, help="held-out problems")
    parser.add_argument("--quick", action="store_true", help="a short run of every phase (not a result)")
    ns = parser.parse_args()
    if ns.quick:
        ns.transcripts, ns.sft_chunk, ns.sft_max_steps, ns.rl_steps, ns.eval = 128, 4, 8, 4, 16
        ns.validation = 8
        ns.work = ns.work.with_name(ns.work.name + "-quick")
    torch.set_num_threads(1)
    rows = MultiplicationTask().sample(ns.eval, torch.Generator().manual_seed(999_983))
    results = [run_seed(int(s), ns.work, ns, rows) for s in ns.seeds.split(",")]
    print(
        f"\nload average (1, 5, 15 min) at the end: {' '.join(load())}; torch threads: 1; {ns.eval} held-out"
    )
    print(
        "\n| seed | SFT steps (s, load; validation success) | RL steps (s, load) "
        "| RL reward, first → last 10 steps | (a) SFT | (b) after RL | (c) after RL, no tools "
        "| calls/episode (a, b, c) |"
    )
    print("|---|---|---|---|---:|---:|---:|---|")
    for r in results:
        sft, rl = r["sft_train"], r["rl_train"]
        calls = ", ".join(f"{r[k]['calls_per_episode']:.2f}" for k in ("sft", "rl", "rl_without_tools"))
        print(
            f"| {r['seed']} | {sft['steps']} ({sft['seconds']:.0f}, {sft['load']}; validation "
            f"{sft['validation'][-1][1]:.2f}) "
            f"| {rl['steps']} ({rl['seconds']:.0f}, {rl.get('load', '?')}) "
            f"| {rl.get('first_reward', math.nan):.3f} → {rl['last_reward']:.3f} | {r['sft']['success']:.3f} "
            f"| {r['rl']['success']:.3f} | {r['rl_without_tools']['success']:.3f} | {calls} |"
        )
    mean = {k: statistics.fmean(r[k]["success"] for r in results) for k in ("sft", "rl", "rl_without_tools")}
    print(f"| mean | | | | {mean['sft']:.3f} | {mean['rl']:.3f} | {mean['rl_without_tools']:.3f} | |")
    raised = all(r["rl"]["success"] > r["sft"]["success"] for r in results)
    print(f"\nRL raises success over the SFT start on every seed: {'yes' if raised else 'NO'}")
    return 0 if ns.quick or mean["rl"] > mean["sft"] else 1  # --quick checks the pipeline, not learning


if __name__ == "__main__":
    sys.exit(main())
