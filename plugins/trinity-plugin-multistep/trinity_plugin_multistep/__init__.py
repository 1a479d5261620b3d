"""trinity-plugin-multistep: step-wise GRPO for multi-step rollouts and the ``multi_step_grpo`` preset.

Components (entry points):

* advantage function ``step_wise_grpo``: :class:`~trinity_plugin_multistep.advantage.StepWiseGRPOAdvantageFn`;
* add strategy ``step_wise_grpo``: :class:`~trinity_plugin_multistep.add_strategy.StepWiseGRPOStrategy`;
* algorithm ``multi_step_grpo``: :class:`~trinity_plugin_multistep.algorithm.MultiStepGRPOAlgorithm`.

The vectorized arithmetic lives in :mod:`trinity_plugin_multistep.kernel`, the metrics in
:mod:`trinity_plugin_multistep.metrics`.
"""

from trinity_plugin_multistep.add_strategy import StepWiseGRPOStrategy
from trinity_plugin_multistep.advantage import StepWiseGRPOAdvantageFn
from trinity_plugin_multistep.algorithm import MultiStepGRPOAlgorithm

__all__ = ["MultiStepGRPOAlgorithm", "StepWiseGRPOAdvantageFn", "StepWiseGRPOStrategy"]
__version__ = "0.1.0"
