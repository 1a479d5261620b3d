"""Helpers of the trinity-plugin-multistep tests: multi-step experience builders, a Python transcription."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from trinity_core.experience import EID, Experience


def make_runs(
    tasks: Sequence[Sequence[tuple[float, int]]], *, earlier_rewards: bool = True, response_length: int = 2
) -> list[Experience]:
    """``tasks[t][k] = (R, L)``: run ``k`` of task ``t`` has ``L`` steps ``0..L-1``, last-step reward ``R``.

    Earlier steps carry the reward ``R`` too, or ``None`` when ``earlier_rewards`` is False. Order: task by
    task, run by run, step by step.
    """
    out = []
    for t, runs in enumerate(tasks):
        for k, (reward, length) in enumerate(runs):
            for s in range(length):
                last = s == length - 1
                out.append(
                    Experience(
                        eid=EID(batch=0, task=t, run=k, step=s, suffix=f"t{t}r{k}s{s}"),
                        tokens=list(range(2 + response_length)),
                        prompt_length=2,
                        reward=float(reward) if (last or earlier_rewards) else None,
                    )
                )
    return out


def scores(exps: Sequence[Experience]) -> torch.Tensor:
    """The per-experience score: the first response entry of ``advantages`` (float64)."""
    return torch.tensor([float(e.advantages[0]) for e in exps], dtype=torch.float64)


def _std(values: list[float]) -> float:
    if len(values) < 2 or len(set(values)) == 1:
        return 0.0
    m = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def python_step_wise(
    exps: Sequence[Experience],
    *,
    epsilon: float = 1e-6,
    enable_step_norm: bool = False,
    std_cal_level: str = "group",
    std_threshold: float | None = None,
) -> dict[str, float | None]:
    """uid -> advantage (None when dropped), from the documented formulas with Python floats."""
    tasks: dict[object, dict[object, list[Experience]]] = {}
    for e in exps:
        tasks.setdefault(e.eid.task, {}).setdefault(e.eid.run, []).append(e)
    last = {
        t: {k: max(reversed(steps), key=lambda e: e.eid.step) for k, steps in runs.items()}
        for t, runs in tasks.items()
    }
    multi = [float(x.reward) for t in tasks if len(last[t]) > 1 for x in last[t].values()]  # type: ignore[arg-type]
    batch_std = _std(multi)
    out: dict[str, float | None] = {}
    for t, runs in tasks.items():
        rewards = {k: float(x.reward) for k, x in last[t].items()}  # type: ignore[arg-type]
        values = list(rewards.values())
        mean = math.fsum(values) / len(values) if len(set(values)) > 1 else values[0]
        std = _std(values)
        sigma = batch_std if std_cal_level == "batch" else std
        dropped = std_threshold is not None and (len(values) < 2 or std <= std_threshold)
        for k, steps in runs.items():
            score = 0.0 if std == 0.0 else (rewards[k] - mean) / (sigma + epsilon)
            for e in steps:
                out[e.eid.uid] = None if dropped else (score / len(steps) if enable_step_norm else score)
    return out
