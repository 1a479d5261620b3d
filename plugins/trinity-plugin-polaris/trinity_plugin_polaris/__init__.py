"""trinity-plugin-polaris: add strategies that filter, correct and refill one explore step's experiences.

Components (entry points, kind ``add_strategy``):

* ``reward_variance``: :class:`~trinity_plugin_polaris.reward_variance.RewardVarianceAddStrategy`;
* ``correct_bias``: :class:`~trinity_plugin_polaris.correct_bias.CorrectBiasAddStrategy`;
* ``duplicate_informative``:
  :class:`~trinity_plugin_polaris.duplicate_informative.DuplicateInformativeAddStrategy` (POLARIS).

Each writes what it keeps through its ``BufferWriter`` in one ``write`` call and returns
``(count, metrics)``.
"""

from trinity_plugin_polaris.correct_bias import CorrectBiasAddStrategy
from trinity_plugin_polaris.duplicate_informative import DuplicateInformativeAddStrategy
from trinity_plugin_polaris.reward_variance import RewardVarianceAddStrategy

__all__ = ["CorrectBiasAddStrategy", "DuplicateInformativeAddStrategy", "RewardVarianceAddStrategy"]
__version__ = "0.1.0"
