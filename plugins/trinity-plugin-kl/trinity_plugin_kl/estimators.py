"""Per-token KL estimators as pure functions of the log-ratio ``logr = logp − ref``.

``logp`` is the policy's log-probability of the sampled token, ``ref`` the reference model's. With
``r = exp(−logr) = π_ref / π_θ`` (Schulman, "Approximating KL Divergence", 2020,
http://joschu.net/blog/kl-approx.html), for tokens sampled from ``π_θ``:

* ``k1 = logr``: unbiased for ``KL(π_θ ‖ π_ref)``, high variance, can be negative;
* ``k2 = ½ logr²``: biased, non-negative, low variance; its gradient ``logr · ∇logp`` is an unbiased
  estimate of ``∇KL`` on-policy;
* ``k3 = r − 1 − log r = exp(−logr) − 1 + logr``: unbiased and non-negative;
* ``abs = |logr|``.

Every function is elementwise, keeps the input's dtype and device and never synchronises with the host.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "LOW_VAR_KL_LOG_RATIO_CLAMP",
    "LOW_VAR_KL_VALUE_CLAMP",
    "abs_kl",
    "k1",
    "k2",
    "k3",
    "low_var_kl",
    "straight_through",
]

#: ``low_var_kl`` clamps ``u = ref − logp`` to ``[−20, 20]`` before ``exp`` (no overflow in float32).
LOW_VAR_KL_LOG_RATIO_CLAMP = 20.0
#: ``low_var_kl`` clamps its result to ``[−10, 10]`` (the lower bound never binds: k3 ≥ 0).
LOW_VAR_KL_VALUE_CLAMP = 10.0


def k1(log_ratio: Tensor) -> Tensor:
    """``k1 = logr``; ``∂k1/∂logp = 1``."""
    return log_ratio


def k2(log_ratio: Tensor) -> Tensor:
    """``k2 = ½ logr²``; ``∂k2/∂logp = logr``."""
    return 0.5 * log_ratio.square()


def k3(log_ratio: Tensor) -> Tensor:
    """``k3 = exp(u) − 1 − u`` with ``u = ref − logp = −logr``; ``∂k3/∂logp = 1 − exp(u)``.

    Computed as ``expm1(u) − u``: near the reference (``|u| ≪ 1``, the usual case) ``exp(u) − 1 − u``
    cancels catastrophically (in float32 at ``u = 1e-4`` the error exceeds the value ``≈ 5e-9``) and
    can even come out negative; ``expm1(u) ≥ u`` keeps k3 accurate and ``≥ 0``. Not clamped (as in the
    reference): the value overflows to ``inf`` for ``u`` above about 88 in float32 (11 in float16).
    Use :func:`low_var_kl` for a bounded value.
    """
    u = -log_ratio
    return torch.expm1(u) - u


def low_var_kl(log_ratio: Tensor) -> Tensor:
    """k3 with clamps: ``u = clamp(−logr, −20, 20)``, ``clamp(exp(u) − u − 1, −10, 10)``.

    The two clamps (those of the reference and of verl) bound the value to ``[0, 10]``: k3 reaches 10
    at ``u ≈ 2.611`` (``π_ref ≈ 13.6 π_θ``) and at ``u ≈ −11.0`` (``π_θ ≈ 6·10⁴ π_ref``). Where a clamp
    binds the gradient is zero, so tokens far from the reference stop being pulled back. :func:`k3` is
    the unclamped value; both are computed with ``expm1``.
    """
    u = (-log_ratio).clamp(-LOW_VAR_KL_LOG_RATIO_CLAMP, LOW_VAR_KL_LOG_RATIO_CLAMP)
    return (torch.expm1(u) - u).clamp(-LOW_VAR_KL_VALUE_CLAMP, LOW_VAR_KL_VALUE_CLAMP)


def abs_kl(log_ratio: Tensor) -> Tensor:
    """``abs = |logr|``; ``∂abs/∂logp = sign(logr)`` (0 at ``logr = 0``)."""
    return log_ratio.abs()


def straight_through(value: Tensor, log_ratio: Tensor) -> Tensor:
    """The value of ``value`` with the gradient of ``k2(log_ratio)``: ``k2 − sg(k2) + sg(value)``.

    Forward, ``k2 − sg(k2)`` is exactly ``0`` for finite inputs, so the result equals ``value``
    bit for bit; backward, only ``k2`` carries a gradient: ``∂/∂logp = logr``, ``∂/∂ref = −logr``
    (verl's ``"+"`` estimators, e.g. ``k3+``: k1 and k3 have the right expected *value* but not the
    right expected *gradient* of the KL; k2 has the right gradient).
    """
    surrogate = k2(log_ratio)
    return surrogate - surrogate.detach() + value.detach()
