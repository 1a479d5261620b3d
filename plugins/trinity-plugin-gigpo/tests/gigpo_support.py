"""Helpers of the trinity-plugin-gigpo tests: multi-turn experience builders."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trinity_core.experience import EID, Experience

Step = tuple[float | None, str | None]
"""(step reward recorded in info, or None for no key; state hash, or None for no hash)."""


def make_episodes(
    tasks: Sequence[Sequence[Sequence[Step]]], final_rewards: Sequence[Sequence[float | None]] | None = None
) -> list[Experience]:
    """``tasks[t][k][s] = (step_reward, state)``: step ``s`` of run ``k`` of task ``t``.

    ``final_rewards[t][k]`` (optional) is ``exp.reward`` of every step of that run.
    """
    out = []
    for t, runs in enumerate(tasks):
        for k, steps in enumerate(runs):
            for s, (step_reward, state) in enumerate(steps):
                info: dict[str, object] = {}
                if step_reward is not None:
                    info["step_reward"] = step_reward
                if state is not None:
                    info["env_state_hash"] = state
                reward = None if final_rewards is None else final_rewards[t][k]
                out.append(
                    Experience(
                        eid=EID(batch=0, task=t, run=k, step=s, suffix=f"t{t}r{k}s{s}"),
                        tokens=[1, 2, 3, 4],
                        prompt_length=2,
                        reward=reward,
                        info=info,
                    )
                )
    return out


def by_uid(exps: Sequence[Experience]) -> dict[str, float]:
    """uid -> the first response entry of ``advantages``."""
    return {e.eid.uid: float(e.advantages[0]) for e in exps}


def uid(t: int, k: int, s: int) -> str:
    return f"0/{t}/{k}/{s}/t{t}r{k}s{s}"


def scores(exps: Sequence[Experience]) -> torch.Tensor:
    return torch.tensor([float(e.advantages[0]) for e in exps], dtype=torch.float64)
