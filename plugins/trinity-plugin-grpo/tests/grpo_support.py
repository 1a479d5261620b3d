"""Helpers of the trinity-plugin-grpo tests: experience builders and a numpy float64 reference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from trinity_core.experience import EID, Experience

ZERO_STD_RTOL = 1e-12


def make_group_exps(
    groups: Sequence[Sequence[float]],
    logprob_means: Sequence[Sequence[float]] | None = None,
    response_length: int = 3,
    batch: int = 0,
) -> list[Experience]:
    """One experience per reward; group ``g`` is task ``g``; log-probs constant ``logprob_means[g][i]``."""
    exps = []
    for task, rewards in enumerate(groups):
        for run, reward in enumerate(rewards):
            lp = 0.0 if logprob_means is None else logprob_means[task][run]
            exps.append(
                Experience(
                    eid=EID(batch=batch, task=task, run=run, suffix=f"s{task}r{run}"),
                    tokens=list(range(2 + response_length)),
                    prompt_length=2,
                    reward=float(reward),
                    logprobs=[lp] * response_length,
                )
            )
    return exps


def interleave(exps: list[Experience], order: Sequence[int]) -> list[Experience]:
    """``exps`` permuted by ``order`` (groups then appear interleaved in the batch)."""
    return [exps[i] for i in order]


def scores(exps: Sequence[Experience]) -> torch.Tensor:
    """The per-experience score: the first response entry of ``advantages`` (float64)."""
    return torch.tensor([float(e.advantages[0]) for e in exps], dtype=torch.float64)


def numpy_grpo(
    rewards: np.ndarray,
    groups: np.ndarray,
    logprob_means: np.ndarray | None = None,
    *,
    epsilon: float = 1e-6,
    std_threshold: float | None = None,
    rank_penalty: float | None = None,
    std_cal_level: str = "group",
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 numpy transcription of the documented formulas: ``(advantages, keep)`` per experience."""
    r = rewards.astype(np.float64).copy()
    ids = np.unique(groups)
    sizes = {g: int((groups == g).sum()) for g in ids}
    if rank_penalty is not None:
        assert logprob_means is not None
        for g in ids:
            idx = np.flatnonzero(groups == g)
            rank = np.empty(len(idx))
            rank[np.argsort(logprob_means[idx], kind="stable")] = np.arange(len(idx))
            r[idx] = rewards[idx] * (1 - rank_penalty * rank / len(idx))

    def std(values: np.ndarray) -> float:
        if len(values) < 2 or values.max() == values.min():
            return 0.0
        s = float(np.std(values, ddof=1))
        return 0.0 if s <= ZERO_STD_RTOL * np.abs(values).max() else s

    multi = np.array([sizes[g] > 1 for g in groups])
    batch_std = std(r[multi]) if multi.sum() > 1 else 0.0
    adv = np.zeros(len(r))
    keep = np.ones(len(r), dtype=bool)
    for g in ids:
        idx = np.flatnonzero(groups == g)
        if len(idx) == 1:
            keep[idx] = std_threshold is None
            continue
        values = r[idx]
        sd = std(values)
        if std_threshold is not None and sd <= std_threshold:
            keep[idx] = False
        if sd == 0.0:
            continue
        sigma = batch_std if std_cal_level == "batch" else sd
        adv[idx] = (values - values.mean()) / (sigma + epsilon)
    return adv, keep
