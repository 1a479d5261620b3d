"""Straight-through KL estimators (verl's ``"+"`` names): one estimator's value, k2's gradient.

``X+`` returns the value of estimator ``X`` and back-propagates the gradient of
``k2 = ½ (logp − ref)²``, i.e. ``∂/∂logp = logp − ref``: k1 and k3 estimate the KL's *value* without
bias but not its *gradient*; k2's gradient is the unbiased on-policy estimate of ``∇KL``. So the
logged KL is faithful and the update is right. Registered: ``k1+``, ``abs+``, ``k3+``, ``low_var_kl+``
(``k2+`` would be ``k2``). Naming differs from verl in one place: verl's ``k3`` *is* the clamped
``low_var_kl``, so verl's ``k3+`` is this plugin's ``low_var_kl+``; here ``k3+`` has the unclamped k3
value (same gradient).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import Tensor

from trinity_core.components import KLFn
from trinity_plugin_kl.estimators import abs_kl, k1, k3, low_var_kl, straight_through

__all__ = ["AbsPlusFn", "K1PlusFn", "K3PlusFn", "LowVarKLPlusFn", "StraightThroughKLFn"]

_PAPER = (
    "J. Schulman, Approximating KL Divergence (2020), http://joschu.net/blog/kl-approx.html; "
    "verl kl_penalty '+' estimators"
)


class StraightThroughKLFn(KLFn, ABC):
    """Base of ``X+``: ``k2 − sg(k2) + sg(forward_value(logp − ref))``; implement :meth:`forward_value`."""

    paper = _PAPER

    @abstractmethod
    def forward_value(self, log_ratio: Tensor) -> Tensor:
        """The reported per-token value, from ``log_ratio = logp − ref`` (its gradient is discarded)."""

    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """Value of :meth:`forward_value`; gradient ``logp − ref`` w.r.t. ``logp`` (``old`` unused)."""
        log_ratio = logprob - ref_logprob
        return straight_through(self.forward_value(log_ratio), log_ratio)


class K1PlusFn(StraightThroughKLFn):
    """k1+: value logp − ref, gradient of ½ (logp − ref)²."""

    def forward_value(self, log_ratio: Tensor) -> Tensor:
        """``k1 = logr``."""
        return k1(log_ratio)


class AbsPlusFn(StraightThroughKLFn):
    """abs+: value |logp − ref|, gradient of ½ (logp − ref)²."""

    def forward_value(self, log_ratio: Tensor) -> Tensor:
        """``|logr|``."""
        return abs_kl(log_ratio)


class K3PlusFn(StraightThroughKLFn):
    """k3+: value exp(ref − logp) − 1 − (ref − logp) (unclamped), gradient of ½ (logp − ref)²."""

    def forward_value(self, log_ratio: Tensor) -> Tensor:
        """Unclamped ``k3``."""
        return k3(log_ratio)


class LowVarKLPlusFn(StraightThroughKLFn):
    """low_var_kl+: value clamped k3 in [0, 10] (verl's k3+), gradient of ½ (logp − ref)² (never clamped)."""

    def forward_value(self, log_ratio: Tensor) -> Tensor:
        """``low_var_kl`` (clamped k3)."""
        return low_var_kl(log_ratio)
