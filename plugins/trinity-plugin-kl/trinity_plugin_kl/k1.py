"""``k1``: the plain log-ratio."""

from __future__ import annotations

from torch import Tensor

from trinity_core.components import KLFn
from trinity_plugin_kl.estimators import k1

__all__ = ["K1Fn"]


class K1Fn(KLFn):
    """k1 = logp − ref: unbiased for KL(π_θ ‖ π_ref), high variance, can be negative.

    As a loss its gradient is ∇logp whatever the reference: the KL loss then only lowers the
    probability of sampled tokens. Use it as a reward penalty, or use ``k1+`` / ``k2`` as a loss.
    """

    paper = "J. Schulman, Approximating KL Divergence (2020), http://joschu.net/blog/kl-approx.html"

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """``logp − ref`` per token (``old_logprob`` unused)."""
        return k1(logprob - ref_logprob)
