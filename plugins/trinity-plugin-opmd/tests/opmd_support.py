"""Helpers of the trinity-plugin-opmd tests: experience builders and float64 numpy transcriptions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from trinity_core.experience import EID, Experience


def make_group_exps(groups: Sequence[Sequence[float]], response_length: int = 3) -> list[Experience]:
    """One experience per reward; group ``g`` is task ``g``."""
    return [
        Experience(
            eid=EID(batch=0, task=task, run=run, suffix=f"s{task}r{run}"),
            tokens=list(range(2 + response_length)),
            prompt_length=2,
            reward=float(reward),
        )
        for task, rewards in enumerate(groups)
        for run, reward in enumerate(rewards)
    ]


def interleave(exps: list[Experience], order: Sequence[int]) -> list[Experience]:
    return [exps[i] for i in order]


def scores(exps: Sequence[Experience]) -> torch.Tensor:
    """The per-experience score: the first response entry of ``advantages`` (float64)."""
    return torch.tensor([float(e.advantages[0]) for e in exps], dtype=torch.float64)


def np_baseline(values: np.ndarray, baseline: str, tau: float) -> float:
    """The documented group baseline of one group, straight from the formula (log-sum-exp via numpy)."""
    if baseline == "mean":
        return float(values.mean())
    m = values.max()
    return float(m + tau * np.log(np.mean(np.exp((values - m) / tau))))


def np_advantages(
    rewards: np.ndarray, groups: np.ndarray, baseline: str = "mean", tau: float = 1.0, shift: float = 0.0
) -> np.ndarray:
    out = np.zeros(len(rewards))
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        out[idx] = rewards[idx] - np_baseline(rewards[idx], baseline, tau) - shift
    return out
