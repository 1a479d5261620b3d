"""trinity-plugin-gspo: sequence-level ratio losses for trinity-core.

Components (entry points):

* policy loss ``gspo``: :class:`~trinity_plugin_gspo.policy_loss.GSPOLossFn` (Group Sequence Policy
  Optimization, token form);
* policy loss ``geo_mean``: :class:`~trinity_plugin_gspo.geo_mean.GMPOPolicyLossFn` (Geometric-Mean Policy
  Optimization);
* algorithm ``gspo``: :class:`~trinity_plugin_gspo.algorithm.GSPOAlgorithm` (GRPO advantages, GSPO loss,
  k2 KL loss, entropy bonus; needs trinity-plugin-grpo, -kl and -entropy).
"""

from trinity_plugin_gspo.algorithm import GSPOAlgorithm
from trinity_plugin_gspo.geo_mean import GMPOPolicyLossFn
from trinity_plugin_gspo.policy_loss import GSPOLossFn

__all__ = ["GMPOPolicyLossFn", "GSPOAlgorithm", "GSPOLossFn"]
__version__ = "0.1.0"
