"""The batch columns the distillation advantages read: mask, student and teacher log-probs.

* mask: ``batch.action_mask`` when the experiences carry one, else ``batch.response_mask`` (the same
  choice :class:`~trinity_core.components.TrainerAdvantage` makes when it stores the result);
* student log-probs: the trainer-side column ``old_logprobs`` (log-probs of the sampled tokens under the
  policy before the update) when the trainer put it in ``batch.extras``, else the rollout log-probs
  ``batch.logprobs`` (what the reference uses by default, ``bypass_old_logprobs=True``);
* teacher log-probs: the column ``teacher_logprobs``, gathered from ``Experience.teacher_logprobs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["student_logprobs", "teacher_logprobs", "token_mask"]


def token_mask(batch: ExperienceBatch) -> Tensor:
    """``(N, R)`` bool: ``action_mask`` if present, else ``response_mask``."""
    mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
    return mask if mask.dtype == torch.bool else mask != 0


def student_logprobs(batch: ExperienceBatch, needed_by: str) -> Tensor:
    """``(N, R)`` student log-probs of the sampled tokens: ``extras["old_logprobs"]``, else ``logprobs``."""
    old = batch.extras.get("old_logprobs")
    if old is not None:
        return old
    if batch.logprobs is not None:
        return batch.logprobs
    return batch.column("old_logprobs", needed_by=needed_by)  # raises a KeyError naming what is there


def teacher_logprobs(batch: ExperienceBatch, needed_by: str) -> Tensor:
    """``(N, R)`` teacher log-probs of the sampled tokens; a KeyError that says how to provide them."""
    try:
        return batch.column("teacher_logprobs", needed_by=needed_by)
    except KeyError as err:
        raise KeyError(
            f"{err.args[0]} Set Experience.teacher_logprobs (one log-prob per response token, from the "
            f"teacher model) in the workflow; info['teacher_logprobs'] is not read."
        ) from None
