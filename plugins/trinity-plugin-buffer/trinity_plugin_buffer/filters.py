"""Filters of ``rollout.experience_pipeline``: ``dynamic_sampling`` and ``drop_truncated``."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from trinity_core.batch import ExperienceBatch
from trinity_core.components import ComponentArgs, ExperienceOperator, Metrics
from trinity_core.ops import segment_std

__all__ = ["DropTruncated", "DynamicSampling"]


class DynamicSampling(ExperienceOperator):
    """DAPO's dynamic sampling: drop task groups whose rewards are all equal (std ≤ ``std_threshold``).

    Yu et al., arXiv:2503.14476, section 3.2: a group whose responses all score the same has advantage 0
    under a group baseline and adds nothing but noise to the step. Kept: groups with
    ``std(r) > std_threshold`` (population std over the scored responses, float64); a group of one is
    dropped. With ``max_extra_rounds = k`` the explorer samples more prompts, up to ``k`` extra rounds,
    until the step has ``rollout.prompts_per_step`` groups (DAPO fills the batch the same way); a step
    with no group left after every round stops the run, or with ``when_empty: keep`` trains on its first
    round unfiltered (an early policy that solves nothing yet). Place it
    before reward shaping (``overlong_penalty``): DAPO filters on the outcome, not the shaped reward.
    Metrics: ``kept_groups``, ``dropped_groups``.
    """

    paper = "https://arxiv.org/abs/2503.14476"

    class Args(ComponentArgs):
        std_threshold: float = Field(
            0.0, ge=0, description="Groups with a reward std at most this are dropped."
        )
        max_extra_rounds: int = Field(
            3, ge=0, description="Extra sampling rounds the explorer may run to fill the step (0: none)."
        )
        when_empty: Literal["error", "keep"] = Field(
            "error",
            description="No group with signal after every round: error (stop the run) or keep (train on "
            "the first round unfiltered; its flat groups have zero advantage).",
        )

    std_threshold: float
    max_extra_rounds: int
    when_empty: Literal["error", "keep"]

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """The groups with distinct rewards."""
        index, groups = batch.group_index["task"], batch.num_groups["task"]
        std = segment_std(batch.rewards, index, groups, unbiased=False, valid_mask=batch.has_reward)
        keep_group = std > self.std_threshold
        kept = keep_group.sum().double()
        metrics = {"kept_groups": kept, "dropped_groups": groups - kept}
        return batch.select(keep_group[index]), metrics


class DropTruncated(ExperienceOperator):
    """Responses that ran out of tokens (``truncate_status == "response_truncated"``) out of the loss.

    ``mode: drop`` removes them from the step; ``mode: mask`` keeps them with an all-False action mask,
    so they count in their group's statistics but not in the loss (DAPO's overlong filtering, section
    3.4, as Trinity-RFT's ``mask_response_truncated`` operator does). Metric: ``truncated_fraction``.
    """

    paper = "https://arxiv.org/abs/2503.14476"

    class Args(ComponentArgs):
        mode: Literal["drop", "mask"] = Field(
            "drop", description="drop: remove the rows; mask: zero their mask."
        )

    mode: Literal["drop", "mask"]

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """The batch without (or with masked) truncated responses."""
        truncated = (
            batch.truncated if batch.truncated is not None else torch.zeros(len(batch), dtype=torch.bool)
        )
        metrics = {"truncated_fraction": truncated.double().mean() if len(batch) else torch.zeros(())}
        if self.mode == "drop":
            return batch.select(~truncated), metrics
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        batch.action_mask = mask & ~truncated.to(mask.device)[:, None]
        if not _lazy_unmade(batch):
            batch.write_back("action_mask")
        return batch, metrics


def _lazy_unmade(batch: ExperienceBatch) -> bool:
    from trinity_core.lazy import LazyExperiences

    source = batch.experiences
    return isinstance(source, LazyExperiences) and not source.materialized
