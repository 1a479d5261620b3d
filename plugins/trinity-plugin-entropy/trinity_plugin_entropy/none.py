"""``none``: no entropy term."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trinity_core.components import EntropyLossFn

__all__ = ["DummyEntropyLossFn"]


class DummyEntropyLossFn(EntropyLossFn):
    """No entropy term: a zero loss attached to the graph, empty metrics.

    The zero is ``torch.where(False, entropy, 0).sum()``: a 0-d tensor in ``entropy``'s dtype and device
    whose gradient is exactly zero, so ``loss.backward()`` works and NaN/inf anywhere in ``entropy``
    reaches neither value nor gradient (``0 · entropy`` would give NaN). The reference's trainer skips
    the entropy computation for ``none``; a trainer may do the same.
    """

    def __call__(
        self, entropy: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(0, {})``."""
        never = torch.zeros((), dtype=torch.bool, device=entropy.device)
        zero = torch.zeros((), dtype=entropy.dtype, device=entropy.device)
        return torch.where(never, entropy, zero).sum(), {}
