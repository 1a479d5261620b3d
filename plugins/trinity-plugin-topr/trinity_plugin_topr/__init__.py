"""trinity-plugin-topr: Tapered Off-Policy REINFORCE (TOPR) for trinity-core.

Components (entry points):

* policy loss ``topr``: :class:`~trinity_plugin_topr.policy_loss.TOPRPolicyLossFn`;
* algorithm ``topr``: :class:`~trinity_plugin_topr.algorithm.TOPRAlgorithm`.
"""

from trinity_plugin_topr.algorithm import TOPRAlgorithm
from trinity_plugin_topr.policy_loss import TOPRPolicyLossFn

__all__ = ["TOPRAlgorithm", "TOPRPolicyLossFn"]
__version__ = "0.1.0"
