"""trinity-plugin-ppo: Proximal Policy Optimization for trinity-core.

Components (entry points):

* policy loss ``ppo``: :class:`~trinity_plugin_ppo.policy_loss.PPOPolicyLossFn` (clipped surrogate,
  asymmetric clip, dual clip, DeepSeek-V3.2 sequence masking, policy-gradient fallback);
* policy loss ``importance_sampling``:
  :class:`~trinity_plugin_ppo.importance_sampling.ImportanceSamplingLossFn`;
* advantage function ``ppo``: :class:`~trinity_plugin_ppo.advantage.PPOAdvantageFn` (GAE in the trainer);
* algorithm ``ppo``: :class:`~trinity_plugin_ppo.algorithm.PPOAlgorithm` (needs trinity-plugin-kl and
  trinity-plugin-entropy).
"""

from trinity_plugin_ppo.advantage import GAEArgs, PPOAdvantageFn
from trinity_plugin_ppo.algorithm import PPOAlgorithm
from trinity_plugin_ppo.gae import masked_gae, reverse_linear_scan
from trinity_plugin_ppo.importance_sampling import ImportanceSamplingLossFn
from trinity_plugin_ppo.policy_loss import DEFAULT_CLIP_RANGE, PPOArgs, PPOPolicyLossFn

__all__ = [
    "DEFAULT_CLIP_RANGE",
    "GAEArgs",
    "ImportanceSamplingLossFn",
    "PPOAdvantageFn",
    "PPOAlgorithm",
    "PPOArgs",
    "PPOPolicyLossFn",
    "masked_gae",
    "reverse_linear_scan",
]
__version__ = "0.1.0"
