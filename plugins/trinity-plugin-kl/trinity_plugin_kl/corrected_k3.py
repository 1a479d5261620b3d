"""``corrected_k3``: k3 weighted by a clamped, detached importance ratio to the rollout policy."""

from __future__ import annotations

from torch import Tensor

from trinity_core.components import KLFn
from trinity_plugin_kl.estimators import k3

__all__ = ["IS_RATIO_MAX", "CorrectedK3Fn"]

#: Upper clamp of the importance ratio ``π_θ / π_old`` (the reference's value).
IS_RATIO_MAX = 2.0


class CorrectedK3Fn(KLFn):
    """corrected_k3 = sg(clamp(exp(logp − old), 0, 2)) · k3, with k3 = exp(ref − logp) − 1 − (ref − logp).

    Tokens are sampled from the rollout policy ``π_old``, not from ``π_θ``; the importance ratio
    ``w = π_θ / π_old`` re-weights k3 to estimate ``KL(π_θ ‖ π_ref)`` off-policy (as in DeepSeek-V3.2's
    unbiased KL estimate). ``w`` is clamped to ``[0, 2]`` for stability and, unlike the reference, is
    *detached*: the gradient is ``w · (1 − exp(ref − logp)) · ∇logp``, the importance-
    weighted k3 gradient, without the extra ``k3 · ∇w`` term the reference back-propagates. Values equal
    the reference's. Without ``old_logprob`` (e.g. the reward-penalty path) this is plain k3.
    """

    paper = "DeepSeek-AI, DeepSeek-V3.2 technical report (2025): unbiased KL estimate"

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """``w · k3`` per token with the detached ``w = clamp(exp(logp − old), 0, 2)``; k3 without ``old``."""
        kl = k3(logprob - ref_logprob)
        if old_logprob is None:
            return kl
        # exp may overflow to inf; the clamp maps it to the bound, so no NaN arises.
        weight = (logprob - old_logprob).detach().exp().clamp(0.0, IS_RATIO_MAX)
        return weight * kl
