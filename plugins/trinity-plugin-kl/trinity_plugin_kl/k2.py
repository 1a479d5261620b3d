"""``k2``: half the squared log-ratio."""

from __future__ import annotations

from torch import Tensor

from trinity_core.components import KLFn
from trinity_plugin_kl.estimators import k2

__all__ = ["K2Fn"]


class K2Fn(KLFn):
    """k2 = ½ (logp − ref)²: biased, non-negative, with an unbiased on-policy gradient of the KL.

    Gradient: ``∂k2/∂logp = logp − ref``.
    """

    paper = "J. Schulman, Approximating KL Divergence (2020), http://joschu.net/blog/kl-approx.html"

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """``½ (logp − ref)²`` per token (``old_logprob`` unused)."""
        return k2(logprob - ref_logprob)
