"""trinity-plugin-rec: REC advantages, the REC policy loss family and the ``rec`` preset for trinity-core.

Components (entry points):

* advantage function ``rec``: :class:`~trinity_plugin_rec.advantage.RECGroupedAdvantage`;
* policy loss ``rec``: :class:`~trinity_plugin_rec.policy_loss.RECPolicyLossFn`;
* algorithm ``rec``: :class:`~trinity_plugin_rec.algorithm.RECAlgorithm`.

The vectorized group arithmetic lives in :mod:`trinity_plugin_rec.kernel`, the metrics in
:mod:`trinity_plugin_rec.metrics`.
"""

from trinity_plugin_rec.advantage import RECGroupedAdvantage
from trinity_plugin_rec.algorithm import RECAlgorithm
from trinity_plugin_rec.policy_loss import RECPolicyLossFn

__all__ = ["RECAlgorithm", "RECGroupedAdvantage", "RECPolicyLossFn"]
__version__ = "0.1.0"
