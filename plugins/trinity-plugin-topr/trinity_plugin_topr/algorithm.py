"""``topr`` algorithm preset: :class:`TOPRAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_reinforce import ReinforcePlusPlusAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["TOPRAlgorithm"]


class TOPRAlgorithm(AlgorithmPreset):
    """TOPR: REINFORCE-style rewards with the tapered off-policy (truncated-ratio) policy loss.

    Tapered Off-Policy REINFORCE (Le Roux et al., arXiv:2503.14286). The common preset flags: the
    ``reinforce`` scores of each task group as advantages, computed in the experience pipeline
    (trinity-rft notes ``grpo`` works too); no critic; a reference model for the ``k2`` KL loss.
    Defaults: 2 responses per task, the ``topr`` loss
    (:class:`~trinity_plugin_topr.policy_loss.TOPRPolicyLossFn`), no KL penalty on rewards, the default
    entropy term.

    Needs trinity-plugin-reinforce (``reinforce``), trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), which this distribution declares as dependencies.
    """

    paper = "https://arxiv.org/abs/2503.14286"
    defaults: ClassVar[Mapping[str, Any]] = {
        **ReinforcePlusPlusAlgorithm.defaults,
        "advantage_fn": "reinforce",
        "policy_loss_fn": "topr",
    }
