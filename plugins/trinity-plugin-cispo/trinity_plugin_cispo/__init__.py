"""trinity-plugin-cispo: Clipped IS-weight Policy Optimization (CISPO) for trinity-core.

Components (entry points):

* policy loss ``cispo``: :class:`~trinity_plugin_cispo.policy_loss.CISPOPolicyLossFn`;
* algorithm ``cispo``: :class:`~trinity_plugin_cispo.algorithm.CISPOAlgorithm`.
"""

from trinity_plugin_cispo.algorithm import CISPOAlgorithm
from trinity_plugin_cispo.policy_loss import CISPOPolicyLossFn

__all__ = ["CISPOAlgorithm", "CISPOPolicyLossFn"]
__version__ = "0.1.0"
