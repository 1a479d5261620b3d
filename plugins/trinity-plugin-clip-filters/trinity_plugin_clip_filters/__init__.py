"""trinity-plugin-clip-filters: GRPO advantages with entropy-signal token filters (Clip_B, Clip_V).

Components (entry points), both trainer-side advantage functions:

* ``clipb``: :class:`~trinity_plugin_clip_filters.clipb.ClipBAdvantageFn` (needs the ``entropys`` column);
* ``clipv``: :class:`~trinity_plugin_clip_filters.clipv.ClipVAdvantageFn` (needs ``entropys`` and ``necs``).

Neither rewrites the batch's ``action_mask``/``response_mask``: clipped tokens get advantage 0 and the
policy-loss mask goes to ``batch.extras["policy_loss_mask"]`` (:data:`POLICY_LOSS_MASK`).
"""

from trinity_plugin_clip_filters.clipb import ClipBAdvantageFn
from trinity_plugin_clip_filters.clipv import ClipVAdvantageFn
from trinity_plugin_clip_filters.filtering import POLICY_LOSS_MASK

__all__ = ["POLICY_LOSS_MASK", "ClipBAdvantageFn", "ClipVAdvantageFn"]
__version__ = "0.1.0"
