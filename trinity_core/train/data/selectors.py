"""The task selectors the core ships (kind ``task_selector``): ``shuffle`` (the default), ``sequential`` and
``random``. Adaptive ones (``offline_easy2hard``, ``difficulty_based``) ship in trinity-plugin-buffer.

``shuffle`` is the order a ``dataset`` task set has always been read in, shared with
:class:`~trinity_core.train.data.dataset_task.DatasetTask` through :class:`EpochOrder`: epoch ``e`` is a
permutation seeded by ``(seed, e)``, ``seed`` drawn from the run's task generator on the first call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trinity_core.components.task_selector import TaskSelector

__all__ = ["EpochOrder", "RandomSelector", "SequentialSelector", "ShuffleSelector"]


class EpochOrder:
    """Rows read in epochs, each epoch every row once: in a seeded random order (``shuffle``), else in
    order. The position (seed, epoch, cursor) is the whole state."""

    def __init__(self, size: int, shuffle: bool) -> None:
        """Nothing is drawn before the first :meth:`take`."""
        self.size, self.shuffle = size, shuffle
        self.seed: int | None = None
        self.epoch = 0
        self.cursor = 0
        self._order: tuple[int, Tensor] | None = None

    def take(self, n: int, generator: torch.Generator) -> Tensor:
        """The next ``n`` rows (wrapping into the next epoch), int64."""
        if self.seed is None:
            self.seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        pieces: list[Tensor] = []
        taken = 0
        while taken < n:
            step = min(n - taken, self.size - self.cursor)
            pieces.append(self._permutation()[self.cursor : self.cursor + step])
            self.cursor += step
            taken += step
            if self.cursor == self.size:
                self.epoch, self.cursor = self.epoch + 1, 0
        return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int64)

    def _permutation(self) -> Tensor:
        if self._order is None or self._order[0] != self.epoch:
            if self.shuffle:
                assert self.seed is not None
                gen = torch.Generator().manual_seed((self.seed + self.epoch) % 2**63)
                self._order = (self.epoch, torch.randperm(self.size, generator=gen))
            else:
                self._order = (self.epoch, torch.arange(self.size))
        return self._order[1]

    def state_dict(self) -> dict[str, Any]:
        """``{"seed", "epoch", "cursor"}``."""
        return {"seed": self.seed, "epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.seed = state["seed"]
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])
        self._order = None


class _EpochSelector(TaskSelector):
    """A selector that reads the rows in epochs (:class:`EpochOrder`)."""

    shuffle = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.order = EpochOrder(self.size, self.shuffle)

    def get_indices(self, batch_size: int) -> Tensor:
        """The next ``batch_size`` rows of the epoch order."""
        return self.order.take(batch_size, self.generator)

    def state_dict(self) -> dict[str, Any]:
        """The position: ``{"seed", "epoch", "cursor"}``."""
        return self.order.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.order.load_state_dict(state)


class ShuffleSelector(_EpochSelector):
    """Every row once per epoch, in a new seeded random order each epoch (the default)."""


class SequentialSelector(_EpochSelector):
    """Every row once per epoch, in the task set's order: rows 0, 1, 2, ..., wrapping."""

    shuffle = False


class RandomSelector(TaskSelector):
    """Each step drawn afresh, uniformly: distinct rows within a step (repeats only when a step asks for
    more rows than the task set has); no epochs."""

    def get_indices(self, batch_size: int) -> Tensor:
        """``batch_size`` rows uniform without replacement within the step (with, past ``size``)."""
        if batch_size <= self.size:
            return torch.randperm(self.size, generator=self.generator)[:batch_size]
        return torch.randint(0, self.size, (batch_size,), generator=self.generator)
