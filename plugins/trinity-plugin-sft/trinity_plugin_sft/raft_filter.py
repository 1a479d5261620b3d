"""``raft`` add strategy: :class:`RAFTAddStrategy`, RAFT's reward ranking of the policy's own samples."""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from trinity_core.batch import gather_group_codes
from trinity_core.components import AddStrategy, ComponentArgs, Metrics
from trinity_core.components.reward_check import finite_rewards
from trinity_core.experience import Experience

__all__ = ["RAFTAddStrategy", "RAFTArgs", "best_of_group"]


class RAFTArgs(ComponentArgs):
    """Arguments of :class:`RAFTAddStrategy`."""

    min_reward: float = Field(
        0.0, description="A response is kept only if its reward exceeds this value (and is its group's best)."
    )


def best_of_group(
    rewards: torch.Tensor, index: torch.Tensor, num_groups: int, min_reward: float
) -> torch.Tensor:
    """``(N,)`` bool: the reward is its task group's maximum (ties all kept) and exceeds ``min_reward``."""
    best = torch.full((num_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, index, rewards, reduce="amax"
    )
    return (rewards == best[index]) & (rewards > min_reward)


class RAFTAddStrategy(AddStrategy):
    """RAFT (Dong et al., arXiv:2304.06767) in mode ``both``: SFT on the best of each task group's samples.

    For each task group (``eid.tid``) the responses with the group's highest reward are kept when that
    reward exceeds ``min_reward``; every experience is still written, with ``action_mask`` False on the
    tokens of the others, so the ``sft`` loss learns from the kept responses only and a step where none
    is kept changes nothing (instead of leaving the learner an empty buffer). Advantages are written as
    zeros: the ``sft`` loss reads none. Metric ``raft/kept_fraction``.
    """

    Args: ClassVar[type[ComponentArgs]] = RAFTArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2304.06767"

    min_reward: float

    async def add(self, experiences: list[Experience], step: int) -> tuple[int, Metrics]:
        """Mark the kept responses, write every experience, return ``(written, metrics)``."""
        if len(experiences) == 0:
            return 0, {}
        rewards = finite_rewards(experiences, f"add strategy {type(self).name()!r}")
        index, num_groups = gather_group_codes(experiences, "task")
        keep = best_of_group(rewards, index, num_groups, self.min_reward)
        # Once per step, outside the loss: per-experience fields are set in Python.
        for exp, kept in zip(experiences, keep.tolist(), strict=True):
            length = len(exp.tokens) - exp.prompt_length
            own = exp.action_mask if exp.action_mask is not None else torch.ones(length, dtype=torch.bool)
            exp.action_mask = own & kept
            exp.advantages = torch.zeros(length, dtype=torch.float32)
        await self.writer.write(experiences)
        return len(experiences), {"raft/kept_fraction": keep.double().mean()}
