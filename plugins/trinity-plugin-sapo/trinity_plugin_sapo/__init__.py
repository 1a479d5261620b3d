"""trinity-plugin-sapo: Soft Adaptive Policy Optimization (SAPO) for trinity-core.

Components (entry points):

* policy loss ``sapo``: :class:`~trinity_plugin_sapo.policy_loss.SAPOPolicyLossFn`;
* algorithm ``sapo``: :class:`~trinity_plugin_sapo.algorithm.SAPOAlgorithm` (GRPO advantages, SAPO loss,
  k2 KL loss, entropy bonus; needs trinity-plugin-grpo, -kl and -entropy).
"""

from trinity_plugin_sapo.algorithm import SAPOAlgorithm
from trinity_plugin_sapo.policy_loss import SAPOPolicyLossFn

__all__ = ["SAPOAlgorithm", "SAPOPolicyLossFn"]
__version__ = "0.1.0"
