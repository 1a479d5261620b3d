"""Environments for bench_learning.py: a policy's held-out score by playing the ``gym`` workflow, and the
scripted baselines (the random policy; for Blackjack also "always stick" and "hit below 17").

Held-out episodes are the task's ``eval_rows(n, seed=0)`` (a generator separate from training's), the
same for every run, so two policies are compared on the same episodes.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["frozen_lake_random_success", "play", "scripted_blackjack"]


def play(
    model: Any,
    tokenizer: Any,
    task: tuple[str, dict[str, Any]],
    workflow_args: dict[str, Any],
    episodes: int,
    *,
    greedy: bool,
    max_new_tokens: int,
) -> dict[str, float]:
    """Success rate, mean return and invalid-action rate of ``model`` over ``episodes`` held-out episodes
    of ``task`` (name, args) played with the ``gym`` workflow and the run's ``workflow_args``, sampled at
    temperature 1 or greedy."""
    from trinity_core import registry
    from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks

    sampling = {
        "max_new_tokens": max_new_tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "greedy": greedy,
    }
    engine = GenerationEngine(model.eval(), tokenizer, sampling)
    workflow = registry.resolve("workflow", "gym")
    runner = WorkflowRunner("gym", workflow, workflow_args, engine)
    rows = registry.create("task", task[0], task[1]).eval_rows(episodes, seed=0)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        outcome = runner.run(make_tasks(workflow, rows, step=0, task_offset=0, repeat_times=1))
    # One experience per turn or per episode: every one of an episode carries its return and info.
    last = {e.eid.task: e for e in outcome.experiences}.values()
    n = max(len(last), 1)
    return {
        "success": sum(e.info["success"] for e in last) / n,
        "return": sum(float(e.reward) for e in last) / n,
        "invalid": sum(bool(e.info["invalid_action"]) for e in last) / n,
        "failed": float(len(outcome.failures)),
    }


def frozen_lake_random_success(max_turns: int) -> float:
    """Exact probability that uniformly random moves reach the goal of the 4x4 map (not slippery) within
    ``max_turns`` moves: dynamic programming over the 16 cells, holes and the goal absorbing."""
    grid = ["SFFF", "FHFH", "FFFH", "HFFG"]
    moves = [(0, -1), (1, 0), (0, 1), (-1, 0)]
    p = [0.0] * 16
    p[0] = 1.0
    reached = 0.0
    for _ in range(max_turns):
        nxt = [0.0] * 16
        for cell in range(16):
            r, c = divmod(cell, 4)
            if grid[r][c] in "HG" or p[cell] == 0:
                continue
            for dr, dc in moves:
                rr, cc = min(max(r + dr, 0), 3), min(max(c + dc, 0), 3)
                nxt[rr * 4 + cc] += p[cell] / 4
        reached += nxt[15]
        nxt[15] = 0.0
        p = nxt
    return reached


def scripted_blackjack(
    task_args: dict[str, Any], episodes: int, max_turns: int
) -> dict[str, dict[str, float]]:
    """Mean return and win rate of scripted policies on the held-out hands (the same seeds as
    :func:`play`): ``random`` (stick or hit with probability 1/2, seeded), ``stick`` (always stick) and
    ``hit<17`` (hit while the sum is below 17). An episode still running after ``max_turns`` actions
    ends with return 0, as in the workflow."""
    import gymnasium as gym
    from trinity_plugin_gym import BlackjackAdapter

    from trinity_core import registry

    rows = registry.create("task", "blackjack", task_args).eval_rows(episodes, seed=0)
    env = gym.make(BlackjackAdapter.env_id, **BlackjackAdapter.env_kwargs)
    coin = torch.Generator().manual_seed(0)
    policies = {
        "random": lambda obs: int(torch.randint(0, 2, (1,), generator=coin)),
        "stick": lambda obs: 0,
        "hit<17": lambda obs: int(obs[0] < 17),
    }
    out = {}
    for name, policy in policies.items():
        returns = []
        for row in rows:
            obs, _ = env.reset(seed=int(row["seed"]))
            total = 0.0
            for _ in range(max_turns):
                obs, reward, terminated, truncated, _ = env.step(policy(obs))
                total += float(reward)
                if terminated or truncated:
                    break
            returns.append(total)
        out[name] = {
            "return": sum(returns) / len(returns),
            "success": sum(r > 0 for r in returns) / len(returns),
        }
    return out
