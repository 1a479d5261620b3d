"""Workflow rollouts: FrozenLake episodes through the batching model wrapper against one at a time.

Run: ``python benchmarks/bench_workflows.py`` (16 tasks x 8 episodes, a few seconds after the imports).
Both sides run the ``gym`` workflow (FrozenLake 4x4, not slippery, ``max_turns`` 8, one experience per
turn) with the same tiny random policy (a one-layer model of width 16, the learning tests' size) and a
character tokenizer: **batched** runs all 128 episodes at once through the explorer's
:class:`~trinity_core.workflows.WorkflowRunner` (the request queue gathers each turn's calls into one
``generate``); **one at a time** runs the same runner on one episode after the other (a generate call
per episode per turn). Reported: generate calls per step, the longest episode's turns, episodes per
second (median of ``--repeats`` timed rounds after one warm-up). Targets (issue 20): batched generate
calls = the longest episode's turns, and batched episodes/s >= 5x one at a time. Exits 1 when missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch
from trinity_plugin_gym import FrozenLakeTask, GymWorkflow

from trinity_core.train.models.policy import build_char_tokenizer, tiny_model
from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks

TINY = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
}
ARGS = {"max_turns": 8, "experience": "step", "history": False, "invalid_action_penalty": -1.0}


def _round(runner: WorkflowRunner, tasks: list[Any], batched: bool) -> tuple[float, int, int]:
    """Seconds, generate calls and the longest episode's turns of one step."""
    before = runner.engine.calls
    start = time.perf_counter()
    one_by_one = (t for task in tasks for t in runner.run([task]).turns)
    turns = runner.run(tasks).turns if batched else list(one_by_one)
    return time.perf_counter() - start, runner.engine.calls - before, max(turns)


def main() -> int:
    """Print the table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=8, help="episodes (runs) per task")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    ns = parser.parse_args()
    torch.set_num_threads(ns.threads)
    task_set = FrozenLakeTask()
    tokenizer = build_char_tokenizer(task_set.alphabet())
    model = tiny_model(len(tokenizer), TINY, seed=0)
    engine = GenerationEngine(
        model, tokenizer, {"max_new_tokens": 2, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": False}
    )
    runner = WorkflowRunner("gym", GymWorkflow, ARGS, engine, max_calls=64)
    rows = task_set.sample(ns.tasks, torch.Generator().manual_seed(0))
    tasks = make_tasks(GymWorkflow, rows, step=0, task_offset=0, repeat_times=ns.episodes)
    results: dict[str, list[tuple[float, int, int]]] = {}
    for mode in ("batched", "one at a time"):
        torch.manual_seed(0)
        _round(runner, tasks, mode == "batched")  # warm-up
        results[mode] = [_round(runner, tasks, mode == "batched") for _ in range(ns.repeats)]
    n = len(tasks)
    print(
        f"FrozenLake 4x4, {ns.tasks} tasks x {ns.episodes} episodes = {n} episodes per step, "
        f"torch threads {ns.threads}"
    )
    print(f"| {'mode':<13} | generate calls / step | longest episode (turns) | episodes / s |")
    print(f"|{'-' * 15}|{'-' * 23}|{'-' * 25}|{'-' * 14}|")
    rate: dict[str, float] = {}
    ok = True
    for mode, rounds in results.items():
        rate[mode] = n / statistics.median(r[0] for r in rounds)
        calls = statistics.median(r[1] for r in rounds)
        longest = statistics.median(r[2] for r in rounds)
        print(f"| {mode:<13} | {calls:>21.0f} | {longest:>23.0f} | {rate[mode]:>12.1f} |")
        if mode == "batched":
            ok &= all(r[1] == r[2] for r in rounds)
    speedup = rate["batched"] / rate["one at a time"]
    print(f"speed-up {speedup:.1f}x (target >= 5x); batched calls == longest episode: {ok}")
    return 0 if ok and speedup >= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
