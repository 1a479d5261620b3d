"""trinity-plugin-grpo: GRPO-family advantages and the GRPO / DAPO presets for trinity-core.

Components (entry points):

* advantage functions in the experience pipeline: ``grpo``
  (:class:`~trinity_plugin_grpo.advantage.GRPOGroupedAdvantage`), ``dr_grpo``
  (:class:`~trinity_plugin_grpo.dr_grpo.DrGRPOAdvantage`), ``opo``
  (:class:`~trinity_plugin_grpo.opo.OPOAdvantage`), ``gpg`` (:class:`~trinity_plugin_grpo.gpg.GPGAdvantage`),
  ``grpo_passk`` (:class:`~trinity_plugin_grpo.passk.GRPOPassKAdvantage`);
* advantage function in the trainer: ``grpo_verl``
  (:class:`~trinity_plugin_grpo.verl_advantage.GRPOVerlAdvantage`);
* add strategy ``grpo``: :class:`~trinity_plugin_grpo.add_strategy.GRPOAddStrategy`;
* algorithm presets ``grpo`` (:class:`~trinity_plugin_grpo.algorithm.GRPOAlgorithm`) and ``dapo``
  (:class:`~trinity_plugin_grpo.dapo.DAPOAlgorithm`).

The vectorized arithmetic lives in :mod:`trinity_plugin_grpo.kernel` (GRPO) and
:mod:`trinity_plugin_grpo.baselines` (the other group baselines), the metrics in
:mod:`trinity_plugin_grpo.metrics`, the POLARIS duplication policy in :mod:`trinity_plugin_grpo.duplicate`
and the presets' configuration checks in :mod:`trinity_plugin_grpo.placement`.
"""

from trinity_plugin_grpo.add_strategy import GRPOAddStrategy
from trinity_plugin_grpo.advantage import GRPOGroupedAdvantage
from trinity_plugin_grpo.algorithm import GRPOAlgorithm
from trinity_plugin_grpo.dapo import DAPOAlgorithm
from trinity_plugin_grpo.dr_grpo import DrGRPOAdvantage
from trinity_plugin_grpo.gpg import GPGAdvantage
from trinity_plugin_grpo.opo import OPOAdvantage
from trinity_plugin_grpo.passk import GRPOPassKAdvantage
from trinity_plugin_grpo.verl_advantage import GRPOVerlAdvantage

__all__ = [
    "DAPOAlgorithm",
    "DrGRPOAdvantage",
    "GPGAdvantage",
    "GRPOAddStrategy",
    "GRPOAlgorithm",
    "GRPOGroupedAdvantage",
    "GRPOPassKAdvantage",
    "GRPOVerlAdvantage",
    "OPOAdvantage",
]
__version__ = "0.1.0"
