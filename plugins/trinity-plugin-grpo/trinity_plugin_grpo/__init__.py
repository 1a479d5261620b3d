"""trinity-plugin-grpo: GRPO group-relative advantages for trinity-core.

Components (entry points):

* advantage function ``grpo``: :class:`~trinity_plugin_grpo.advantage.GRPOGroupedAdvantage`;
* add strategy ``grpo``: :class:`~trinity_plugin_grpo.add_strategy.GRPOAddStrategy`.

The vectorized arithmetic lives in :mod:`trinity_plugin_grpo.kernel`, the metrics in
:mod:`trinity_plugin_grpo.metrics` and the POLARIS duplication policy in
:mod:`trinity_plugin_grpo.duplicate`.
"""

from trinity_plugin_grpo.add_strategy import GRPOAddStrategy
from trinity_plugin_grpo.advantage import GRPOGroupedAdvantage

__all__ = ["GRPOAddStrategy", "GRPOGroupedAdvantage"]
__version__ = "0.1.0"
