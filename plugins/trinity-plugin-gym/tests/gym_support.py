"""Shared by the gym tests: the learning config, success rates of a policy and of the random policy."""

from __future__ import annotations

from pathlib import Path
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
MAX_TURNS = 8
WORKFLOW_ARGS = {
    "max_turns": MAX_TURNS,
    "experience": "step",
    "history": False,
    "invalid_action_penalty": -1.0,
}


def config(algorithm: str, steps: int) -> dict[str, Any]:
    """FrozenLake with one experience per turn, each turn seeing the current map only; a tiny model."""
    return {
        "algorithm": {"algorithm_type": algorithm, "repeat_times": 8, "kl_loss_fn": "none"},
        "tasks": {"name": "frozen_lake", "eval_size": 0},
        "rollout": {
            "prompts_per_step": 8,
            "max_new_tokens": 2,
            "workflow": "gym",
            "workflow_args": WORKFLOW_ARGS,
        },
        "trainer": {
            "total_steps": steps,
            "lr": 1e-2,
            "checkpoint_every": 0,
            "progress": False,
            "threads": 1,
            "seed": 0,
        },
        "model": {"config": TINY},
    }


def success_rate(weights: Path | None, episodes: int = 256, greedy: bool = False) -> float:
    """Fraction of ``episodes`` sampled episodes (temperature 1) of the tiny model that reach the goal;
    ``weights`` a run directory (its last checkpoint), or None for the untrained model."""
    task_set = FrozenLakeTask()
    tokenizer = build_char_tokenizer(task_set.alphabet())
    model = tiny_model(len(tokenizer), TINY, seed=0)
    if weights is not None:
        from safetensors.torch import load_file

        last = sorted((weights / "checkpoints").iterdir())[-1]
        model.load_state_dict(load_file(last / "model.safetensors"), strict=False)
    engine = GenerationEngine(
        model,
        tokenizer,
        {"max_new_tokens": 2, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": greedy},
    )
    runner = WorkflowRunner("gym", GymWorkflow, WORKFLOW_ARGS, engine)
    rows = task_set.sample(episodes, torch.Generator().manual_seed(1))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        outcome = runner.run(make_tasks(GymWorkflow, rows, step=0, task_offset=0, repeat_times=1))
    last_steps = {}
    for exp in outcome.experiences:
        last_steps[exp.eid.task] = exp.info["success"]
    return sum(last_steps.values()) / episodes


def random_policy_success(max_turns: int = MAX_TURNS) -> float:
    """Exact probability that uniformly random actions reach the goal of the 4x4 map within
    ``max_turns`` moves (dynamic programming over the 16 cells; holes and the goal absorb)."""
    grid = ["SFFF", "FHFH", "FFFH", "HFFG"]
    moves = [(0, -1), (1, 0), (0, 1), (-1, 0)]
    p = torch.zeros(16, dtype=torch.float64)
    p[0] = 1.0
    reached = 0.0
    for _ in range(max_turns):
        nxt = torch.zeros_like(p)
        for cell in range(16):
            r, c = divmod(cell, 4)
            if grid[r][c] in "HG" or p[cell] == 0:
                continue
            for dr, dc in moves:
                rr, cc = min(max(r + dr, 0), 3), min(max(c + dc, 0), 3)
                nxt[rr * 4 + cc] += p[cell] / 4
        reached += float(nxt[15])
        nxt[15] = 0.0
        p = nxt
    return reached
