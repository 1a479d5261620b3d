"""``reinforceplusplus`` algorithm preset: :class:`ReinforcePlusPlusAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_ppo import PPOAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["ReinforcePlusPlusAlgorithm"]


class ReinforcePlusPlusAlgorithm(AlgorithmPreset):
    """REINFORCE++: whitened discounted returns computed in the trainer, with a PPO-clip loss.

    Hu et al., arXiv:2501.03262. Flags: no critic, a reference model (``k2`` KL loss), advantages **in
    the trainer** (``reinforceplusplus`` is a trainer-side function), batch balancing allowed, schema
    ``experience``. Defaults: 2 responses per task, ``reinforceplusplus`` (this distribution), ``ppo``
    (trinity-plugin-ppo), no KL penalty and KL loss ``k2`` (trinity-plugin-kl), the default entropy term
    (trinity-plugin-entropy).
    """

    paper = "https://arxiv.org/abs/2501.03262"
    compute_advantage_in_trainer = True
    defaults: ClassVar[Mapping[str, Any]] = {
        **PPOAlgorithm.defaults,
        "repeat_times": 2,
        "advantage_fn": "reinforceplusplus",
    }
