"""``abs``: the absolute log-ratio."""

from __future__ import annotations

from torch import Tensor

from trinity_core.components import KLFn
from trinity_plugin_kl.estimators import abs_kl

__all__ = ["AbsFn"]


class AbsFn(KLFn):
    """abs = |logp − ref|: a non-negative distance, not an unbiased KL estimate.

    Gradient: ``sign(logp − ref)`` (0 where they are equal).
    """

    paper = "J. Schulman, Approximating KL Divergence (2020), http://joschu.net/blog/kl-approx.html"

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """``|logp − ref|`` per token (``old_logprob`` unused)."""
        return abs_kl(logprob - ref_logprob)
