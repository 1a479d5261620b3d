"""``multi_step_grpo`` preset: :class:`MultiStepGRPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_ppo import PPOAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["MultiStepGRPOAlgorithm"]


class MultiStepGRPOAlgorithm(AlgorithmPreset):
    """Multi-step GRPO: step-wise GRPO advantages (``step_wise_grpo``) with the PPO clipped loss.

    The common preset flags: no critic, a reference model (``k2`` KL loss), advantages in the experience
    pipeline (``step_wise_grpo`` needs whole tasks), batch balancing allowed, ``experience`` schema.
    Defaults: 8 trajectories per task, loss ``ppo``, no KL penalty, KL loss ``k2``, the default entropy
    term. Needs trinity-plugin-ppo (``ppo``), trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), declared as dependencies.
    """

    defaults: ClassVar[Mapping[str, Any]] = {
        **PPOAlgorithm.defaults,
        "repeat_times": 8,
        "advantage_fn": "step_wise_grpo",
    }
