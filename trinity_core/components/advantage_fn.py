"""Advantage functions: the base class every advantage function derives from, and those that run in
the trainer on the columnar batch.

Group-relative advantages computed in the experience pipeline are in
:mod:`trinity_core.components.advantage`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor

from trinity_core.components.base import Component, Metrics
from trinity_core.experience import Experience

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["AdvantageFn", "GroupLevel", "TrainerAdvantage"]

GroupLevel = Literal["task", "run", "step"]
"""Which EID id forms a group: ``task`` (``eid.tid``), ``run`` (``eid.rid``) or ``step`` (``eid.sid``)."""


def make_batch(
    exps: list[Experience],
    fields: Collection[str] | None = None,
    group_levels: Collection[GroupLevel] = ("task", "run", "step"),
) -> ExperienceBatch:
    """The columnar batch of ``exps`` (only ``fields`` and ``group_levels`` when given)."""
    from trinity_core.batch import ExperienceBatch

    return ExperienceBatch.from_experiences(exps, fields=fields, group_levels=group_levels)


class AdvantageFn(Component, ABC):
    """Base of advantage functions: ``__call__(exps, **kwargs) -> (exps, metrics)``.

    Functions that run in the trainer (``compute_in_trainer()`` True, the default) receive the trainer's
    batch; those that run in the experience pipeline receive a list of experiences.
    ``required_fields`` names the experience fields / batch columns the function reads, so a
    configuration can be checked before a run.
    """

    kind: ClassVar[str] = "advantage_fn"
    required_fields: ClassVar[tuple[str, ...]] = ("reward",)

    @abstractmethod
    def __call__(self, exps: Any, **kwargs: Any) -> tuple[Any, Metrics]:
        """Compute advantages; return the experiences (or batch) with advantages set, and metrics."""

    @classmethod
    def compute_in_trainer(cls) -> bool:
        """Whether this function runs in the trainer (True) or in the experience pipeline (False)."""
        return True


class TrainerAdvantage(AdvantageFn):
    """Advantage functions that run in the trainer on the columnar batch (GAE, REINFORCE++, RLOO, ...).

    Implement :meth:`compute`; calling the function computes the advantages and returns, stores them on
    the batch (``batch.advantages``, ``batch.returns``, both ``(N, R)`` and zero outside the response
    mask) and returns ``(batch, metrics)``. Inputs come from the batch: ``batch.token_level_scores()``
    for rewards, ``batch.response_mask`` / ``batch.action_mask``, ``batch.group_index`` for groups and
    ``batch.column(name)`` for trainer-side columns such as ``values``, ``old_logprobs``,
    ``ref_logprobs`` or ``entropys`` (list them in ``required_fields``). Vectorized, no host sync.
    """

    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask")

    @abstractmethod
    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """Return ``(advantages, returns, metrics)``: two ``(N, R)`` float tensors and 0-d metrics."""

    def __call__(self, exps: Any, **kwargs: Any) -> tuple[Any, Metrics]:
        """Compute on an :class:`~trinity_core.batch.ExperienceBatch` (a list is batched first)."""
        batch = exps if not isinstance(exps, list) else make_batch(exps)
        advantages, returns, metrics = self.compute(batch)
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        valid = mask.to(device=advantages.device, dtype=torch.bool)
        batch.advantages = torch.where(valid, advantages, 0.0)
        batch.returns = torch.where(valid, returns, 0.0)
        return batch, metrics

    @classmethod
    def compute_in_trainer(cls) -> bool:
        """Always True."""
        return True
