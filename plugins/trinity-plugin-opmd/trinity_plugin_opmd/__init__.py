"""trinity-plugin-opmd: OPMD and AsymRE for trinity-core.

Components (entry points):

* advantage functions ``opmd`` (:class:`OPMDGroupAdvantage`) and ``asymre`` (:class:`ASYMREGroupAdvantage`),
  both in the experience pipeline;
* add strategy ``opmd`` (:class:`OPMDAddStrategy`);
* policy loss ``opmd`` (:class:`OPMDPolicyLossFn`);
* algorithms ``opmd`` (:class:`OPMDAlgorithm`) and ``asymre`` (:class:`AsymREAlgorithm`).

The vectorized baselines live in :mod:`trinity_plugin_opmd.kernel`.
"""

from trinity_plugin_opmd.add_strategy import OPMDAddStrategy
from trinity_plugin_opmd.asymre_advantage import ASYMREGroupAdvantage
from trinity_plugin_opmd.asymre_algorithm import AsymREAlgorithm
from trinity_plugin_opmd.opmd_advantage import OPMDGroupAdvantage
from trinity_plugin_opmd.opmd_algorithm import OPMDAlgorithm
from trinity_plugin_opmd.policy_loss import OPMDPolicyLossFn

__all__ = [
    "ASYMREGroupAdvantage",
    "AsymREAlgorithm",
    "OPMDAddStrategy",
    "OPMDAlgorithm",
    "OPMDGroupAdvantage",
    "OPMDPolicyLossFn",
]
__version__ = "0.1.0"
