"""``grpo`` algorithm preset: :class:`GRPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_ppo import PPOAlgorithm

from trinity_core.components import AlgorithmPreset
from trinity_core.components.preset_rules import advantage_placement

__all__ = ["GRPOAlgorithm"]


class GRPOAlgorithm(AlgorithmPreset):
    """GRPO: group-relative advantages in the experience pipeline, PPO-clip loss, k2 KL loss.

    Group-relative policy optimisation (Shao et al., *DeepSeekMath*, arXiv:2402.03300):
    ``A_i = (r_i - mean(r)) / (std(r) + eps)`` over the responses to one task. The common preset flags:
    no critic, a reference model (for the ``k2`` KL loss), advantages computed in the experience
    pipeline (``grpo`` needs whole task groups), batch balancing allowed, ``experience`` schema.
    Defaults: 2 responses per task, advantage ``grpo``, policy loss ``ppo``, no KL penalty, KL loss
    ``k2``, the default entropy term.

    Its configuration rule rejects an advantage function that runs in the trainer (such as
    ``grpo_verl``): experiences would reach the trainer without advantages. Needs trinity-plugin-ppo,
    trinity-plugin-kl and trinity-plugin-entropy, which this distribution declares as dependencies.
    """

    paper = "https://arxiv.org/abs/2402.03300"
    defaults: ClassVar[Mapping[str, Any]] = {
        **PPOAlgorithm.defaults,
        "repeat_times": 2,
        "advantage_fn": "grpo",
    }
    config_rules = (advantage_placement,)
