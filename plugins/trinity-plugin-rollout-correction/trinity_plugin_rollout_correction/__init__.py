"""Rollout correction: importance weights between the explorer's (behaviour) and the learner's policy.

* :func:`~trinity_plugin_rollout_correction.weights.rollout_is_weights`: the weights, token or sequence
  level, truncated or masked;
* :class:`~trinity_plugin_rollout_correction.policy_loss.RolloutCorrectionLossFn` (``rollout_correction``):
  any policy loss with its advantages weighted by them.
"""

from trinity_plugin_rollout_correction.policy_loss import RolloutCorrectionLossFn
from trinity_plugin_rollout_correction.weights import rollout_is_weights

__all__ = ["RolloutCorrectionLossFn", "rollout_is_weights"]
