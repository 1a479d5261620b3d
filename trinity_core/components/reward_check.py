"""Reading the rewards of experiences for a group computation, with one error for a missing or bad one.

Group advantages and add strategies need a finite reward on every experience they score. These helpers
read the Python floats of the experiences (never a device tensor, so no host synchronisation) and, when
one is ``None``, NaN or infinite, raise a ``ValueError`` that names the component and the experience.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from operator import attrgetter

import torch
from torch import Tensor

from trinity_core.batch import all_finite
from trinity_core.experience import Experience

__all__ = ["EVERY_EXPERIENCE", "check_finite_rewards", "finite_reward", "finite_rewards"]

_REWARD = attrgetter("reward")

EVERY_EXPERIENCE = "every experience needs a finite reward"
"""The default requirement stated by the error of :func:`finite_reward`."""


def finite_reward(
    exp: Experience, where: str, *, role: str = "", requirement: str = EVERY_EXPERIENCE
) -> float:
    """``exp.reward`` as a float, or a ValueError naming ``where`` and the experience.

    Args:
        exp: the experience.
        where: the component, e.g. ``"grpo advantage"``; starts the message.
        role: words after the experience id, e.g. ``" (the last step of its run)"``.
        requirement: what the component needs, stated in the message.
    """
    reward = exp.reward
    if reward is None or not math.isfinite(reward):
        raise ValueError(
            f"{where}: experience {exp.eid.uid}{role} has reward {reward!r}; {requirement}: score it with "
            "the reward function or filter it out first"
        )
    return float(reward)


def check_finite_rewards(exps: Sequence[Experience], where: str) -> None:
    """Raise :func:`finite_reward`'s error for the first experience without a finite reward."""
    for exp in exps:
        finite_reward(exp, where)


def finite_rewards(exps: Sequence[Experience], where: str) -> Tensor:
    """The rewards of ``exps`` as ``(N,)`` float64, or :func:`finite_reward`'s error for the first bad one."""
    raw = list(map(_REWARD, exps))
    if not all_finite(raw):
        check_finite_rewards(exps, where)
    if not raw:
        return torch.zeros(0, dtype=torch.float64)
    try:  # one C-level copy of the floats into a buffer the tensor shares
        return torch.frombuffer(array("d", raw), dtype=torch.float64)
    except TypeError:  # a reward that array() does not take (e.g. a 0-d tensor)
        return torch.tensor([float(r) for r in raw], dtype=torch.float64)
