"""Experiences made on first access: :class:`LazyExperiences`, the source list of a columnar batch.

It knows nothing of the batch type (``make`` receives whatever was attached), so this module and
:mod:`trinity_core.batch` import one way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from trinity_core.experience import Experience

__all__ = ["LazyExperiences"]

_Batch = TypeVar("_Batch")


class LazyExperiences(Sequence[Experience], Generic[_Batch]):
    """The experiences of a batch that was built from columns, created on first access.

    A producer that already has its data as columns (the trainer's rollout) builds the
    :class:`~trinity_core.batch.ExperienceBatch` directly and gives it a ``LazyExperiences`` as
    ``experiences``: the :class:`~trinity_core.experience.Experience` objects are made only when someone
    reads them (index, iterate, slice), once, by ``make(batch)``, with their tensor fields as views of the
    batch's columns at that moment (as ``ExperienceBatch.write_back`` makes them). ``len()`` and
    ``ExperienceBatch.source_rewards`` never create them, so a consumer of columns only pays for columns.

    Args:
        count: the number of experiences (rows of the batch).
        make: builds the experiences from the batch (called at most once).
        rewards: the rewards the experiences will hold (Python values, as given to the producer; whoever
            changes the batch's rewards before they are made updates this list, see
            :func:`trinity_core.batch_rows.replace_rewards`).
        model_version: the version of the policy that sampled every row, when one policy did (a rollout);
            a reader learns it without making the experiences. None: read each experience's
            ``info["model_version"]``.
    """

    def __init__(
        self,
        count: int,
        make: Callable[[_Batch], list[Experience]],
        rewards: Sequence[float | None],
        model_version: int | None = None,
    ) -> None:
        self.model_version = model_version
        self._count = count
        self._make = make
        self.rewards = list(rewards)
        self.batch: _Batch | None = None
        self._items: list[Experience] | None = None

    def attach(self, batch: _Batch) -> None:
        """Bind the batch whose columns the experiences will view (the producer calls this once)."""
        self.batch = batch

    @property
    def materialized(self) -> bool:
        """True once the experiences exist."""
        return self._items is not None

    def materialize(self) -> list[Experience]:
        """The experiences (made now if they do not exist yet)."""
        if self._items is None:
            if self.batch is None:
                raise RuntimeError("LazyExperiences: no batch attached; the producer must call attach()")
            items = self._make(self.batch)
            if len(items) != self._count:
                raise RuntimeError(f"LazyExperiences: made {len(items)} experiences, expected {self._count}")
            for item, reward in zip(items, self.rewards, strict=True):
                item.reward = reward  # the rewards as they are now (an operator may have replaced them)
            self._items = items
        return self._items

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        return self.materialize()[index]

    def __iter__(self) -> Iterator[Experience]:
        return iter(self.materialize())

    def __repr__(self) -> str:
        state = "made" if self.materialized else "not made yet"
        return f"LazyExperiences({self._count} experiences, {state})"
