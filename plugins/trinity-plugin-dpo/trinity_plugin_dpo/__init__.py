"""trinity-plugin-dpo: Direct Preference Optimization for trinity-core.

Components (entry points):

* policy loss ``dpo``: :class:`~trinity_plugin_dpo.dpo.DPOLossFn` (one logit per pair);
* algorithm ``dpo``: :class:`~trinity_plugin_dpo.algorithm.DPOAlgorithm` (names KL ``none``/``k2`` from
  trinity-plugin-kl and entropy ``default`` from trinity-plugin-entropy; reuses the configuration checks
  of trinity-plugin-sft).
"""

from trinity_plugin_dpo.algorithm import DPO_KL_LOSS, DPO_REPEAT_TIMES, DPOAlgorithm
from trinity_plugin_dpo.dpo import PAIR_KEYS, DPOArgs, DPOLossFn, pair_order

__all__ = [
    "DPO_KL_LOSS",
    "DPO_REPEAT_TIMES",
    "PAIR_KEYS",
    "DPOAlgorithm",
    "DPOArgs",
    "DPOLossFn",
    "pair_order",
]
__version__ = "0.1.0"
