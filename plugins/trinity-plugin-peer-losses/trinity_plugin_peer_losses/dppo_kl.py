"""``dppo_kl`` policy loss: :class:`DPPOKLPolicyLossFn` (verl ``loss_mode=dppo_kl``)."""

from __future__ import annotations

from typing import ClassVar, Final

import torch
from torch import Tensor

from trinity_plugin_peer_losses._dppo import DPPOPolicyLossBase

__all__ = ["BINARY_KL_EPS", "DPPOKLPolicyLossFn", "binary_kl"]

BINARY_KL_EPS: Final[float] = 1e-8
"""Added to ``1 − p`` and ``1 − p_old`` inside the logarithm of the binary KL (as verl)."""


def binary_kl(logprob: Tensor, old_logprob: Tensor) -> Tensor:
    """Binary KL of the sampled token, ``KL(Bern(p_old) ‖ Bern(p))``, elementwise.

    ``D = p_old (log p_old − log p) + (1 − p_old) · log((1 − p_old + ε) / (1 − p + ε))``.

    ``p = exp(logprob)``; ``1 − p`` is computed as ``−expm1(log p)`` (exact near ``p = 1``) and clamped at
    0, so log-probs above 0 cannot make it negative; ``ε`` = :data:`BINARY_KL_EPS`.
    """
    old_p = torch.exp(old_logprob)
    rest = (-torch.expm1(logprob)).clamp_min(0)
    old_rest = (-torch.expm1(old_logprob)).clamp_min(0)
    return old_p * (old_logprob - logprob) + old_rest * (
        torch.log(old_rest + BINARY_KL_EPS) - torch.log(rest + BINARY_KL_EPS)
    )


class DPPOKLPolicyLossFn(DPPOPolicyLossBase):
    """DPPO-Binary-KL: REINFORCE with truncated IS, dropping tokens whose binary KL exceeds δ the wrong way.

    DPPO (arXiv:2602.04879) with the KL trust region of the sampled token's Bernoulli ``(p, 1 − p)``:
    ``D_t = KL(Bern(p_old) ‖ Bern(p))`` (:func:`binary_kl`, only the chosen token's log-probs needed). A
    token leaves the region only if ``D_t`` exceeds the threshold *and* its probability moved the way its
    advantage pushes; a move against the advantage (a conservative update) is always allowed:

        ``M_t = [D_t <= δ_high] ∨ [p <= p_old]`` if ``A_t > 0``,
        ``M_t = [D_t <= δ_low] ∨ [p >= p_old]`` otherwise.

    Loss, numerics and metrics: :class:`~trinity_plugin_peer_losses._dppo.DPPOPolicyLossBase`
    (``L = agg(−A · sg(min(r, C)) · M · log π)``; defaults ``δ = 0.2`` nats, ``C = 20``, ``token-mean``).
    Metric prefix ``dppo_kl``.
    """

    metric_prefix: ClassVar[str] = "dppo_kl"

    def trust_region_mask(self, logprob: Tensor, old_logprob: Tensor, advantages: Tensor) -> Tensor:
        """``M`` above; ``p <= p_old`` is tested as ``log π <= log π_old``."""
        kl = binary_kl(logprob, old_logprob)
        up = (kl <= self.divergence_high) | (logprob <= old_logprob)
        down = (kl <= self.divergence_low) | (logprob >= old_logprob)
        return torch.where(advantages > 0, up, down)
