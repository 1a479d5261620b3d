"""Reward checks shared by the group computations of this plugin."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from trinity_core.experience import Experience

__all__ = ["finite_rewards"]


def finite_rewards(exps: Sequence[Experience], where: str) -> Tensor:
    """The rewards of ``exps`` as ``(N,)`` float64, or a ValueError naming the first missing/non-finite one.

    Reads the Python floats of the experiences (never a device tensor), so it costs no host sync.
    """
    values = [exp.reward for exp in exps]
    for exp, reward in zip(exps, values, strict=True):
        if reward is None or not math.isfinite(reward):
            raise ValueError(
                f"{where}: experience {exp.eid.uid} has reward {reward!r}; a finite reward is needed for "
                "every experience: score it with the reward function or filter it out first"
            )
    return torch.tensor(values, dtype=torch.float64)
