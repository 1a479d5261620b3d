"""trinity-plugin-gigpo: GiGPO advantages for multi-turn agents and the ``gigpo`` preset for trinity-core.

Components (entry points):

* advantage function ``gigpo``: :class:`~trinity_plugin_gigpo.advantage.GiGPOAdvantageFn`;
* algorithm ``gigpo``: :class:`~trinity_plugin_gigpo.algorithm.GiGPOAlgorithm`.

The vectorized arithmetic lives in :mod:`trinity_plugin_gigpo.kernel`, the metrics in
:mod:`trinity_plugin_gigpo.metrics`.
"""

from trinity_plugin_gigpo.advantage import GiGPOAdvantageFn
from trinity_plugin_gigpo.algorithm import GiGPOAlgorithm

__all__ = ["GiGPOAdvantageFn", "GiGPOAlgorithm"]
__version__ = "0.1.0"
