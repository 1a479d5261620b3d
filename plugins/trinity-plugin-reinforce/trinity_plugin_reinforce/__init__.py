"""trinity-plugin-reinforce: REINFORCE-family advantage functions and presets for trinity-core.

Components (entry points):

* advantage functions ``reinforce`` (:class:`REINFORCEGroupAdvantage`, experience pipeline),
  ``reinforceplusplus`` (:class:`REINFORCEPLUSPLUSAdvantageFn`), ``reinforce_plus_plus_baseline``
  (:class:`REINFORCEPlusPlusBaselineAdvantageFn`), ``remax`` (:class:`REMAXAdvantageFn`) and ``rloo``
  (:class:`RLOOAdvantageFn`), the last four in the trainer;
* algorithms ``reinforceplusplus`` (:class:`ReinforcePlusPlusAlgorithm`) and ``rloo``
  (:class:`RLOOAlgorithm`).

The vectorized arithmetic lives in :mod:`trinity_plugin_reinforce.kernel`.
"""

from trinity_plugin_reinforce.reinforce import REINFORCEGroupAdvantage
from trinity_plugin_reinforce.reinforce_plus_plus import REINFORCEPLUSPLUSAdvantageFn
from trinity_plugin_reinforce.reinforce_plus_plus_baseline import REINFORCEPlusPlusBaselineAdvantageFn
from trinity_plugin_reinforce.reinforceplusplus_algorithm import ReinforcePlusPlusAlgorithm
from trinity_plugin_reinforce.remax import REMAXAdvantageFn
from trinity_plugin_reinforce.rloo import RLOOAdvantageFn
from trinity_plugin_reinforce.rloo_algorithm import RLOOAlgorithm

__all__ = [
    "REINFORCEGroupAdvantage",
    "REINFORCEPLUSPLUSAdvantageFn",
    "REINFORCEPlusPlusBaselineAdvantageFn",
    "REMAXAdvantageFn",
    "RLOOAdvantageFn",
    "RLOOAlgorithm",
    "ReinforcePlusPlusAlgorithm",
]
__version__ = "0.1.0"
