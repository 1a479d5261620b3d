"""``none``: no KL term."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from trinity_core.components import KLFn

if TYPE_CHECKING:
    from trinity_core.ops import LossScale

__all__ = ["DummyKLFn"]


def graph_safe_zero(x: Tensor) -> Tensor:
    """A 0-d ``0`` in ``x``'s dtype and device, attached to ``x``'s graph with an exactly-zero gradient.

    ``torch.where`` with an always-false condition neither reads ``x``'s values (NaN/inf in ``x`` reach
    neither the value nor the gradient, unlike ``0 · x``) nor detaches: ``loss.backward()`` works.
    """
    never = torch.zeros((), dtype=torch.bool, device=x.device)
    return torch.where(never, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum()


class DummyKLFn(KLFn):
    """No KL: zero per-token KL, a zero loss, rewards unchanged; the coefficient never changes.

    Like the reference, both paths return empty metrics (nothing is measured).
    """

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """``zeros_like(logprob)``."""
        return torch.zeros_like(logprob)

    def calculate_kl_loss(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str | None = None,
        old_logprob: Tensor | None = None,
        loss_scale: LossScale | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(0, {})``: the zero is on ``logprob``'s device and graph (see :func:`graph_safe_zero`)."""
        return graph_safe_zero(logprob), {}

    def apply_kl_penalty_to_reward(
        self,
        token_level_scores: Tensor,
        logprob: Tensor,
        ref_logprob: Tensor | None,
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(token_level_scores, {})``: rewards are the scores; no coefficient update."""
        return token_level_scores, {}
