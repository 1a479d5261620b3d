"""Reward mappers of ``rollout.experience_pipeline``: ``overlong_penalty``, ``reward_scale``,
``reward_clip``."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, model_validator

from trinity_core.batch import ExperienceBatch
from trinity_core.batch_rows import replace_rewards
from trinity_core.components import ComponentArgs, ExperienceOperator, Metrics

__all__ = ["OverlongPenalty", "RewardClip", "RewardScale"]


class OverlongPenalty(ExperienceOperator):
    """DAPO's soft overlong punishment, added to the reward (Yu et al., arXiv:2503.14476, eq. 13).

    With ``L`` the response length in tokens (its closing EOS included), ``L_max = max_length`` (unset:
    the run's ``rollout.max_new_tokens``) and ``L_c = cache_length``::

        R_len = 0                           L ≤ L_max − L_c
              = ((L_max − L_c) − L) / L_c   L_max − L_c < L ≤ L_max
              = −1                          L > L_max

    and ``r ← r + penalty · R_len``. Rows without a reward keep none. Metrics: ``penalized_fraction``,
    ``penalty_mean``.
    """

    paper = "https://arxiv.org/abs/2503.14476"

    class Args(ComponentArgs):
        max_length: int | None = Field(
            None, ge=2, description="L_max in tokens; unset: the run's rollout.max_new_tokens."
        )
        cache_length: int = Field(4, ge=1, description="L_c: the soft zone's length in tokens.")
        penalty: float = Field(1.0, ge=0, description="Reward taken for a response of L_max tokens or more.")

    max_length: int | None
    cache_length: int
    penalty: float

    def lengths(self) -> tuple[int, int]:
        """``(L_max, L_c)``; L_c must be shorter than L_max."""
        limit = self.max_length if self.max_length is not None else self.context.max_new_tokens
        if limit is None:
            raise ValueError("overlong_penalty needs max_length (the run did not give its max_new_tokens)")
        if self.cache_length >= limit:
            raise ValueError(
                f"overlong_penalty: cache_length {self.cache_length} must be below max_length {limit}"
            )
        return limit, self.cache_length

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """The rewards with the length penalty."""
        limit, cache = self.lengths()
        length = batch.response_lengths.to(torch.float64)
        soft = ((limit - cache) - length) / cache
        shaped = (
            torch.where(length > limit, -1.0, torch.where(length > limit - cache, soft, 0.0)) * self.penalty
        )
        replace_rewards(batch, batch.rewards + shaped.to(batch.rewards.device))
        hit = (shaped < 0) & batch.has_reward
        metrics = {
            "penalized_fraction": hit.double().mean() if len(batch) else torch.zeros(()),
            "penalty_mean": shaped.mean() if len(batch) else torch.zeros(()),
        }
        return batch, metrics


class RewardScale(ExperienceOperator):
    """r ← scale · r + shift."""

    class Args(ComponentArgs):
        scale: float = Field(1.0, description="Multiplies every reward.")
        shift: float = Field(0.0, description="Added after scaling.")

    scale: float
    shift: float

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """The scaled rewards."""
        replace_rewards(batch, batch.rewards * self.scale + self.shift)
        return batch, {}


class RewardClip(ExperienceOperator):
    """r ← min(max(r, low), high) (an unset bound does not clip). Metric: ``clipped_fraction``."""

    class Args(ComponentArgs):
        low: float | None = Field(None, description="Lowest reward kept; unset: no lower bound.")
        high: float | None = Field(None, description="Highest reward kept; unset: no upper bound.")

        @model_validator(mode="after")
        def _ordered(self) -> Any:
            if self.low is not None and self.high is not None and self.low > self.high:
                raise ValueError(f"low {self.low} is above high {self.high}")
            return self

    low: float | None
    high: float | None

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """The clipped rewards."""
        if self.low is None and self.high is None:
            return batch, {"clipped_fraction": torch.zeros((), dtype=torch.float64)}
        clipped = batch.rewards.clamp(min=self.low, max=self.high)
        changed = (clipped != batch.rewards) & batch.has_reward
        replace_rewards(batch, clipped)
        return batch, {"clipped_fraction": changed.double().mean() if len(batch) else torch.zeros(())}
