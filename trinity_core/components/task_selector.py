"""Task selectors: which rows of a task set each step samples (kind ``task_selector``).

A selector sees a task set as ``size`` rows numbered ``0 .. size - 1``. Each step the explorer asks it
for ``get_indices(n)`` rows, samples ``G`` responses per row, and tells it how they went with
``update(indices, values)``: ``values[i]`` is the mean reward of the responses to row ``indices[i]``
(a pass rate for 0/1 rewards; NaN when no response was scored). ``state_dict()`` is saved in every
checkpoint, so a resumed run selects the same rows an uninterrupted one would.

Randomness comes from ``generator``, the run's task generator, which checkpoints hold already: a
selector that draws only from it needs no random state of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor

from trinity_core.components.base import Component

__all__ = ["TaskSelector"]


class TaskSelector(Component, ABC):
    """Base of task selectors: ``TaskSelector(size=..., generator=..., columns=..., **args)``.

    Implement :meth:`get_indices`; override :meth:`update`, :meth:`state_dict` /
    :meth:`load_state_dict` (a selector with a position or estimates), :meth:`metrics` and
    :meth:`required_columns` (dataset columns it reads, e.g. a difficulty score) when they apply.

    Example (every row in turn)::

        class RoundRobin(TaskSelector):
            \"\"\"Rows 0, 1, 2, ... in order, wrapping.\"\"\"

            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.position = 0

            def get_indices(self, batch_size):
                rows = (self.position + torch.arange(batch_size)) % self.size
                self.position += batch_size
                return rows

            def state_dict(self):
                return {"position": self.position}

            def load_state_dict(self, state):
                self.position = int(state["position"])

    Args:
        size: the number of rows of the task set (at least 1).
        generator: the run's task generator (saved in checkpoints); draw every random number from it.
        columns: the task set's columns named by :meth:`required_columns`, as ``(size,)`` tensors.
    """

    kind: ClassVar[str] = "task_selector"

    def __init__(
        self,
        *,
        size: int = 1,
        generator: torch.Generator | None = None,
        columns: Mapping[str, Tensor] | None = None,
        **args: Any,
    ) -> None:
        super().__init__(**args)
        if size < 1:
            raise ValueError(
                f"task selector {self.name()!r}: the task set has {size} rows; it needs at least one"
            )
        self.size = int(size)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.columns = dict(columns or {})

    @abstractmethod
    def get_indices(self, batch_size: int) -> Tensor:
        """The rows of the next ``batch_size`` prompts: an int64 tensor of shape ``(batch_size,)`` with
        values in ``[0, size)`` (a row may repeat)."""

    def update(self, indices: Tensor, values: Tensor) -> None:
        """Feedback after the rows ``indices`` were sampled: ``values`` (float64, same shape) holds the
        mean reward of each row's responses, NaN when none was scored. Default: ignored."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to select as this one would (JSON-friendly values or tensors)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from what :meth:`state_dict` returned."""

    def metrics(self, indices: Tensor) -> dict[str, Tensor]:
        """Metrics of the rows just selected (0-d tensors, logged as ``buffer/<name>``); default none."""
        return {}

    def required_columns(self) -> tuple[str, ...]:
        """Columns of the task set this selector reads (passed as ``columns``); default none."""
        return ()
