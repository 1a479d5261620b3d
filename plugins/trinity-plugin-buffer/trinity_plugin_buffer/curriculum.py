"""``offline_easy2hard`` task selector: a fixed curriculum from a difficulty column."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, TaskSelector

__all__ = ["OfflineEasy2HardSelector"]


class OfflineEasy2HardSelector(TaskSelector):
    """Rows sorted once from easy to hard by the column ``key``, served in that order, wrapping.

    Order: ascending ``key`` (a difficulty), or descending with ``higher_is_easier`` (a pass rate or a
    confidence); ties keep the task set's order. Row ``k`` of a step's draw is entry
    ``(cursor + k) mod size`` of the sorted order, ``cursor`` counting every row served so far (its
    state). Trinity-RFT's ``offline_easy2hard`` sorts by its feature columns the same way (highest
    feature first), see docs/buffer.md.
    """

    class Args(ComponentArgs):
        key: str = Field("difficulty", min_length=1, description="Column holding each row's difficulty.")
        higher_is_easier: bool = Field(
            False, description="Serve the highest values first (the column is a pass rate, not a difficulty)."
        )

    key: str
    higher_is_easier: bool

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cursor = 0
        self._order: Tensor | None = None

    def required_columns(self) -> tuple[str, ...]:
        """The difficulty column."""
        return (self.key,)

    def order(self) -> Tensor:
        """Row numbers from easy to hard."""
        if self._order is None:
            values = self.columns.get(self.key)
            if values is None or values.shape != (self.size,):
                raise ValueError(f"offline_easy2hard needs column {self.key!r} with one value per row")
            keys = -values if self.higher_is_easier else values
            self._order = torch.sort(keys.to(torch.float64), stable=True).indices
        return self._order

    def get_indices(self, batch_size: int) -> Tensor:
        """The next ``batch_size`` rows of the curriculum."""
        positions = (self.cursor + torch.arange(batch_size)) % self.size
        self.cursor += batch_size
        return self.order()[positions]

    def state_dict(self) -> dict[str, Any]:
        """``{"cursor": rows served}``."""
        return {"cursor": self.cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.cursor = int(state["cursor"])
