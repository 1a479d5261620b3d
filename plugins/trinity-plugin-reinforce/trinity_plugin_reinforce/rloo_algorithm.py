"""``rloo`` algorithm preset: :class:`RLOOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_reinforce.reinforceplusplus_algorithm import ReinforcePlusPlusAlgorithm

__all__ = ["RLOOAlgorithm"]


class RLOOAlgorithm(ReinforcePlusPlusAlgorithm):
    """RLOO: leave-one-out baselines over the responses to each task, computed in the trainer, PPO-clip loss.

    Ahmadian et al., arXiv:2402.14740: ``A_i = r_i - mean_{j != i}(r_j)``. The flags of
    :class:`~trinity_plugin_reinforce.ReinforcePlusPlusAlgorithm` (advantages **in the trainer**:
    ``rloo`` is a trainer-side function). Defaults: 2 responses per task, ``rloo`` (this distribution),
    ``ppo`` (trinity-plugin-ppo), no KL penalty and KL loss ``k2`` (trinity-plugin-kl), the default
    entropy term (trinity-plugin-entropy).
    """

    paper = "https://arxiv.org/abs/2402.14740"
    defaults: ClassVar[Mapping[str, Any]] = {**ReinforcePlusPlusAlgorithm.defaults, "advantage_fn": "rloo"}
