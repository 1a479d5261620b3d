"""``dppo_tv`` policy loss: :class:`DPPOTVPolicyLossFn` (verl ``loss_mode=dppo_tv``)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from trinity_plugin_peer_losses._dppo import DPPOPolicyLossBase

__all__ = ["DPPOTVPolicyLossFn"]


class DPPOTVPolicyLossFn(DPPOPolicyLossBase):
    """DPPO-Binary-TV: REINFORCE with truncated IS, dropping tokens whose probability moved more than δ.

    DPPO (arXiv:2602.04879) with the total-variation trust region of the sampled token's Bernoulli
    ``(p, 1 − p)``, ``p = π(y_t)``, ``p_old = π_old(y_t)``: its TV distance is ``|p − p_old|``, and a token
    leaves the region only when it moved too far the way its advantage pushes:

        ``M_t = [p − p_old <= δ_high]`` if ``A_t > 0``,   ``M_t = [p − p_old >= −δ_low]`` otherwise.

    Loss, numerics and metrics: :class:`~trinity_plugin_peer_losses._dppo.DPPOPolicyLossBase`
    (``L = agg(−A · sg(min(r, C)) · M · log π)``; defaults ``δ = 0.2``, ``C = 20``, ``token-mean``).
    Metric prefix ``dppo_tv``.
    """

    metric_prefix: ClassVar[str] = "dppo_tv"

    def trust_region_mask(self, logprob: Tensor, old_logprob: Tensor, advantages: Tensor) -> Tensor:
        """``M`` above, from the probability shift ``p − p_old`` (``p = exp(log π)``)."""
        shift = torch.exp(logprob) - torch.exp(old_logprob)
        return torch.where(advantages > 0, shift <= self.divergence_high, shift >= -self.divergence_low)
