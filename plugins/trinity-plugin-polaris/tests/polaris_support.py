"""Helpers of the trinity-plugin-polaris tests: grouped experiences, a recording writer, numpy formulas."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from trinity_core.buffer import BufferWriter
from trinity_core.experience import EID, Experience


class RecordingWriter(BufferWriter):
    """A writer that records each ``write`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Experience]] = []

    async def write(self, data: list[Experience]) -> None:
        self.calls.append(list(data))


def make_exps(
    groups: Sequence[Sequence[float]],
    logprob_means: Sequence[Sequence[float]] | None = None,
    tasks: Sequence[Any] | None = None,
    length: int = 3,
) -> list[Experience]:
    """Group ``g`` = task ``tasks[g]`` (default ``g``); constant log-probs ``logprob_means[g][i]``."""
    exps = []
    for g, rewards in enumerate(groups):
        for run, reward in enumerate(rewards):
            lp = 0.0 if logprob_means is None else logprob_means[g][run]
            exps.append(
                Experience(
                    eid=EID(batch=0, task=g if tasks is None else tasks[g], run=run, suffix=f"p{g}r{run}"),
                    tokens=list(range(2 + length)),
                    prompt_length=2,
                    reward=float(reward),
                    logprobs=[lp] * length,
                    info={"source": [g, run]},
                )
            )
    return exps


def run_add(strategy: Any, exps: list[Experience]) -> tuple[int, dict[str, Any]]:
    result: tuple[int, dict[str, Any]] = asyncio.run(strategy.add(exps, 0))
    return result


def numpy_informative(groups: Sequence[Sequence[float]], threshold: float) -> list[bool]:
    """The earlier Trinity-RFT strategies' selection: size >= 2 and np.var (population) > threshold."""
    return [len(g) >= 2 and float(np.var(np.asarray(g, dtype=np.float64))) > threshold for g in groups]


def numpy_correct_bias(
    rewards: Sequence[float], lps: Sequence[float], penalty: float, eps: float
) -> np.ndarray:
    """CorrectBiasAddStrategy's formula of earlier Trinity-RFT releases for one group of n >= 2, with the
    corrected reward in the numerator (reference-differences.md#rank-penalty)."""
    r = np.asarray(rewards, dtype=np.float64)
    rank = np.argsort(np.argsort(np.asarray(lps)))
    corrected = r * (1 - penalty * rank / len(r))
    return (corrected - corrected.mean()) / (corrected.std(ddof=1) + eps)
