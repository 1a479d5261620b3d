"""trinity-plugin-sppo: the sPPO trust-band policy loss for trinity-core.

Components (entry points):

* policy loss ``sppo``: :class:`~trinity_plugin_sppo.policy_loss.sPPOPolicyLossFn`;
* algorithm ``sppo``: :class:`~trinity_plugin_sppo.algorithm.sPPOAlgorithm`.
"""

from trinity_plugin_sppo.algorithm import sPPOAlgorithm
from trinity_plugin_sppo.policy_loss import sPPOPolicyLossFn

__all__ = ["sPPOAlgorithm", "sPPOPolicyLossFn"]
__version__ = "0.1.0"
