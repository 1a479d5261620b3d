"""``k3``: Schulman's unbiased non-negative estimator, unclamped."""

from __future__ import annotations

from torch import Tensor

from trinity_core.components import KLFn
from trinity_plugin_kl.estimators import k3

__all__ = ["K3Fn"]


class K3Fn(KLFn):
    """k3 = exp(ref − logp) − 1 − (ref − logp): unbiased, non-negative, lower variance than k1.

    Gradient: ``∂k3/∂logp = 1 − exp(ref − logp)``. Not clamped, as in the reference: the value
    overflows to ``inf`` when ``ref − logp`` exceeds about 88 (float32); ``low_var_kl`` is the
    clamped variant.
    """

    paper = "J. Schulman, Approximating KL Divergence (2020), http://joschu.net/blog/kl-approx.html"

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """``exp(u) − 1 − u`` with ``u = ref − logp`` per token (``old_logprob`` unused)."""
        return k3(logprob - ref_logprob)
