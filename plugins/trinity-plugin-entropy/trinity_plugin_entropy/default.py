"""``default``: the usual entropy bonus."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from trinity_core.components import EntropyLossFn

__all__ = ["DefaultEntropyLossFn"]


class DefaultEntropyLossFn(EntropyLossFn):
    """Entropy bonus: returns entropy_coef · agg(H, action_mask); the trainer subtracts it from the loss.

    The total loss is therefore ``L = L_pg − entropy_coef · agg(H)``: a positive ``entropy_coef``
    raises entropy. ``agg`` is the component's ``loss_agg_mode``, else the algorithm's (passed by the
    trainer), with the trainer's global normalizers when it passes ``loss_scale``. Masked positions
    (NaN/inf included) reach neither the value nor the gradient. Metric ``entropy_loss``: the unscaled
    ``agg(H)``.
    """

    def __call__(
        self, entropy: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(entropy_coef · agg(entropy, action_mask), {"entropy_loss": agg(entropy, action_mask)})``."""
        value = self.aggregate(entropy, action_mask)
        return value * self.entropy_coef, {"entropy_loss": value.detach()}
