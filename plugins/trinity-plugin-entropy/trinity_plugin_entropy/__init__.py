"""Entropy losses for trinity-core: ``default``, ``mix`` and ``none``.

The trainer subtracts the returned loss (``L = L_pg − entropy_loss``): a positive ``entropy_coef``
rewards entropy.
"""

from trinity_plugin_entropy.default import DefaultEntropyLossFn
from trinity_plugin_entropy.mix import MixEntropyLossFn
from trinity_plugin_entropy.none import DummyEntropyLossFn

__all__ = ["DefaultEntropyLossFn", "DummyEntropyLossFn", "MixEntropyLossFn"]
