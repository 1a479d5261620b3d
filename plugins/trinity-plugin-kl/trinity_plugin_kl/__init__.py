"""KL functions for trinity-core: ``none``, ``k1``, ``k2``, ``k3``, ``low_var_kl``, ``abs``, ``corrected_k3``
and the straight-through ``k1+``, ``abs+``, ``k3+``, ``low_var_kl+``.

Each serves as reward penalty (``kl_penalty_fn``) and as loss (``kl_loss_fn``) with the fixed or adaptive
coefficient of :class:`trinity_core.components.KLFn`. Formulas: :mod:`trinity_plugin_kl.estimators`.
"""

from trinity_plugin_kl.absolute import AbsFn
from trinity_plugin_kl.corrected_k3 import CorrectedK3Fn
from trinity_plugin_kl.k1 import K1Fn
from trinity_plugin_kl.k2 import K2Fn
from trinity_plugin_kl.k3 import K3Fn
from trinity_plugin_kl.low_var_kl import LowVarKLFn
from trinity_plugin_kl.none import DummyKLFn
from trinity_plugin_kl.straight_through import (
    AbsPlusFn,
    K1PlusFn,
    K3PlusFn,
    LowVarKLPlusFn,
    StraightThroughKLFn,
)

__all__ = [
    "AbsFn",
    "AbsPlusFn",
    "CorrectedK3Fn",
    "DummyKLFn",
    "K1Fn",
    "K1PlusFn",
    "K2Fn",
    "K3Fn",
    "K3PlusFn",
    "LowVarKLFn",
    "LowVarKLPlusFn",
    "StraightThroughKLFn",
]
