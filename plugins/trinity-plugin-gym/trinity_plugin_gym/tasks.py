"""``frozen_lake`` and ``blackjack``: environment seeds as task sets, the first observation as the prompt."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs
from trinity_core.train.data.tasks import Task
from trinity_plugin_gym.adapters import BlackjackAdapter, FrozenLakeAdapter

__all__ = ["BlackjackTask", "FrozenLakeTask", "start_prompt"]


@functools.cache
def start_prompt() -> str:
    """The rendered first observation of FrozenLake 4x4 (the same for every seed: the map is fixed)."""
    import gymnasium as gym

    adapter = FrozenLakeAdapter()
    env = gym.make(adapter.env_id, **adapter.env_kwargs)
    try:
        observation, _ = env.reset(seed=0)
        return adapter.render(env, observation)
    finally:
        env.close()


class _Args(ComponentArgs):
    seeds: int = Field(1000, ge=1, description="Environment seeds are drawn from [0, seeds).")


class FrozenLakeTask(Task):
    """FrozenLake episodes (4x4, not slippery): rows ``{"prompt": <map as text>, "seed": int}``.

    The episode's reward is its return, computed by the ``gym`` workflow, so no reward function is used.
    """

    Args: ClassVar[type[ComponentArgs]] = _Args
    default_reward_fns: ClassVar[tuple[str, ...]] = ()
    seeds: int

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``seed``."""
        return ("prompt", "seed")

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """``n`` seeds uniform in ``[0, seeds)``; the prompt is the start position's map."""
        start = start_prompt()
        return [
            {"prompt": start, "seed": s}
            for s in torch.randint(0, self.seeds, (n,), generator=generator).tolist()
        ]

    def alphabet(self) -> str:
        """The adapter's characters."""
        return FrozenLakeAdapter().alphabet()

    def max_response_tokens(self) -> int:
        """The longest action word and EOS."""
        return 6


@functools.cache
def _blackjack_env() -> Any:
    """One Blackjack environment for rendering first observations (rows are drawn in one thread)."""
    import gymnasium as gym

    return gym.make(BlackjackAdapter.env_id, **BlackjackAdapter.env_kwargs)


class BlackjackTask(Task):
    """Blackjack hands: rows ``{"prompt": <first observation as text>, "seed": int}``.

    Use it with the ``gym`` workflow and ``adapter: blackjack``; the episode's return (+1, 0, -1) is the
    reward, computed by the workflow, so no reward function is used.
    """

    Args: ClassVar[type[ComponentArgs]] = _Args
    default_reward_fns: ClassVar[tuple[str, ...]] = ()
    seeds: int

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``seed``."""
        return ("prompt", "seed")

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """``n`` seeds uniform in ``[0, seeds)``; the prompt is the hand that seed deals."""
        env, adapter = _blackjack_env(), BlackjackAdapter()
        rows = []
        for s in torch.randint(0, self.seeds, (n,), generator=generator).tolist():
            observation, _ = env.reset(seed=s)
            rows.append({"prompt": adapter.render(env, observation), "seed": s})
        return rows

    def alphabet(self) -> str:
        """The adapter's characters."""
        return BlackjackAdapter().alphabet()

    def max_response_tokens(self) -> int:
        """The longest action word and EOS."""
        return 6
