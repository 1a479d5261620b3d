"""trinity-plugin-mix: RL on rollouts plus SFT on expert data (MIX, CHORD) for trinity-core.

Components (entry points):

* policy losses ``mix`` (:class:`MIXPolicyLossFn`) and ``mix_chord`` (:class:`MIXCHORDPolicyLossFn`);
* algorithms ``mix`` (:class:`MIXAlgorithm`) and ``mix_chord`` (:class:`MIXCHORDAlgorithm`).

For micro-batch- and rank-invariant training pass ``loss_scale=mix_normalizers(masks, expert_masks)``.
"""

from trinity_plugin_mix.loss_scale import MixLossScale, mix_normalizers, subset_masks
from trinity_plugin_mix.mix import MIXArgs, MIXPolicyLossFn
from trinity_plugin_mix.mix_algorithm import MIXAlgorithm
from trinity_plugin_mix.mix_chord import MIXCHORDArgs, MIXCHORDPolicyLossFn, mu_schedule
from trinity_plugin_mix.mix_chord_algorithm import MIXCHORDAlgorithm
from trinity_plugin_mix.mixed import MixedArgs, MixedPolicyLoss
from trinity_plugin_mix.ppo_clip import DUAL_CLIP_C, LOG_RATIO_CLAMP, PPOTokenTerms, ppo_clip_terms

__all__ = [
    "DUAL_CLIP_C",
    "LOG_RATIO_CLAMP",
    "MIXAlgorithm",
    "MIXArgs",
    "MIXCHORDAlgorithm",
    "MIXCHORDArgs",
    "MIXCHORDPolicyLossFn",
    "MIXPolicyLossFn",
    "MixLossScale",
    "MixedArgs",
    "MixedPolicyLoss",
    "PPOTokenTerms",
    "mix_normalizers",
    "mu_schedule",
    "ppo_clip_terms",
    "subset_masks",
]
__version__ = "0.1.0"
