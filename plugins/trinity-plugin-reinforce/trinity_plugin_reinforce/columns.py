"""Batch columns read by the trainer-side advantage functions of this plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["loss_mask", "reward_baselines"]


def loss_mask(batch: ExperienceBatch) -> Tensor:
    """``(N, R)`` bool: the action mask when the batch has one, else the response mask.

    The same mask :class:`~trinity_core.components.TrainerAdvantage` zeroes the results outside of.
    """
    mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
    return mask.to(torch.bool)


def reward_baselines(batch: ExperienceBatch, needed_by: str) -> Tensor:
    """``batch.extras["reward_baselines"]`` as ``(N,)`` float64; a clear error when absent/misshapen."""
    try:
        baselines = batch.column("reward_baselines", needed_by=needed_by)
    except KeyError as exc:
        raise KeyError(
            f"{exc.args[0]} 'reward_baselines' (N,) is the reward of a greedy (argmax) response to "
            "each prompt: the trainer must generate and score it and store it in "
            "batch.extras['reward_baselines']; without greedy rollouts use another advantage function "
            "(e.g. 'rloo' or 'reinforce_plus_plus_baseline')"
        ) from None
    if baselines.dim() == 2 and baselines.shape[1] == 1:
        baselines = baselines[:, 0]
    if baselines.shape != (len(batch),):
        raise ValueError(
            f"{needed_by}: batch.extras['reward_baselines'] has shape {tuple(baselines.shape)}; expected "
            f"({len(batch)},), one baseline reward per experience"
        )
    return baselines.to(torch.float64)
