"""trinity-plugin-buffer: the adaptive parts of trinity-core's buffer pillar.

Components (entry points):

* task selectors ``offline_easy2hard`` (:class:`~trinity_plugin_buffer.curriculum.OfflineEasy2HardSelector`)
  and ``difficulty_based`` (:class:`~trinity_plugin_buffer.difficulty.DifficultyBasedSelector`);
* experience operators ``dynamic_sampling`` and ``drop_truncated`` (:mod:`trinity_plugin_buffer.filters`),
  ``overlong_penalty``, ``reward_scale`` and ``reward_clip`` (:mod:`trinity_plugin_buffer.shaping`);
* replay priority functions ``linear_decay`` and ``reward_variance``
  (:mod:`trinity_plugin_buffer.priorities`).
"""

from trinity_plugin_buffer.curriculum import OfflineEasy2HardSelector
from trinity_plugin_buffer.difficulty import DifficultyBasedSelector
from trinity_plugin_buffer.filters import DropTruncated, DynamicSampling
from trinity_plugin_buffer.priorities import LinearDecayPriority, RewardVariancePriority
from trinity_plugin_buffer.shaping import OverlongPenalty, RewardClip, RewardScale

__all__ = [
    "DifficultyBasedSelector",
    "DropTruncated",
    "DynamicSampling",
    "LinearDecayPriority",
    "OfflineEasy2HardSelector",
    "OverlongPenalty",
    "RewardClip",
    "RewardScale",
    "RewardVariancePriority",
]
__version__ = "0.1.0"
