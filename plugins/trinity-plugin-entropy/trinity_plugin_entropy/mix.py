"""``mix``: the entropy bonus on the non-expert rows of a mixed (RL + expert SFT) batch."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from trinity_core.components import EntropyLossFn

__all__ = ["MixEntropyLossFn"]


class MixEntropyLossFn(EntropyLossFn):
    """Entropy bonus on non-expert rows: entropy_coef · agg(H, action_mask ∧ ¬expert_mask).

    For the MIX algorithm: expert (SFT) rows carry no sampled-policy entropy to regularise. The row
    filter is a mask, not indexing (``entropy[~expert_mask]`` would synchronise with the host), so each
    expert row is an empty row: it adds no token and, in ``seq-mean-*`` modes, is not counted as a
    sequence, exactly as if the rows had been removed (the reference's result whenever each kept row has
    a selected token). All rows expert gives ``0`` (the reference: ``0`` for ``token-mean``, NaN for
    ``seq-mean-*``). With the trainer's ``loss_scale`` the step's global counts normalise, as for every
    loss. Metric ``entropy_loss``: the unscaled aggregate.
    """

    requires: ClassVar[frozenset[str]] = frozenset({"expert_data"})

    def __call__(
        self,
        entropy: Tensor,
        action_mask: Tensor,
        expert_mask: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Aggregate ``entropy`` over the tokens of ``action_mask`` in rows where ``expert_mask`` is False.

        Raises:
            ValueError: ``expert_mask`` is missing, or is not one flag per row of ``entropy``.
        """
        if expert_mask is None:
            raise ValueError(
                "entropy loss 'mix' needs expert_mask=(B,) bool (True for expert/SFT rows); pass the batch's "
                "expert_mask, or use entropy_loss_fn 'default' for batches without expert data"
            )
        if expert_mask.shape != entropy.shape[:1]:
            raise ValueError(
                f"entropy loss 'mix': expert_mask has shape {tuple(expert_mask.shape)} but entropy has "
                f"{entropy.shape[0]} rows; pass one flag per row, shape ({entropy.shape[0]},)"
            )
        expert = expert_mask if expert_mask.dtype == torch.bool else expert_mask != 0
        keep = (action_mask != 0) & ~expert.unsqueeze(-1)
        value = self.aggregate(entropy, keep)
        return value * self.entropy_coef, {"entropy_loss": value.detach()}
