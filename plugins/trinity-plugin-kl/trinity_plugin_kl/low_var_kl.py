"""``low_var_kl``: k3 with the reference's (and verl's) clamps."""

from __future__ import annotations

from torch import Tensor

from trinity_core.components import KLFn
from trinity_plugin_kl.estimators import low_var_kl

__all__ = ["LowVarKLFn"]


class LowVarKLFn(KLFn):
    """low_var_kl = clamp(exp(u) − u − 1, −10, 10) with u = clamp(ref − logp, −20, 20).

    The same estimator as ``k3``, bounded to ``[0, 10]`` (the reference clamps silently;
    here the clamp is the documented contract). The value saturates at 10 for ``ref − logp ≳ 2.611``
    or ``≲ −11.0``; there the gradient is exactly 0, so those tokens are no longer pulled towards the
    reference. Called ``k3`` in verl.
    """

    paper = "J. Schulman, Approximating KL Divergence (2020), http://joschu.net/blog/kl-approx.html"

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """Clamped k3 per token (``old_logprob`` unused)."""
        return low_var_kl(logprob - ref_logprob)
