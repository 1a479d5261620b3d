"""``ppo`` algorithm preset: :class:`PPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset

__all__ = ["PPOAlgorithm"]


class PPOAlgorithm(AlgorithmPreset):
    """PPO: critic-based GAE advantages in the trainer with the clipped-surrogate loss.

    Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347), as in trinity-rft 0.6.0:
    ``L = -min(r A, clip(r, 1 - eps, 1 + eps) A)``. Flags: **a critic** provides values for the ``ppo``
    (GAE) advantages, computed **in the trainer**; a reference model; batch balancing allowed;
    ``experience`` schema. Defaults: one rollout per task, advantage and loss ``ppo``, no KL penalty on
    rewards, KL loss ``k2``, the default entropy term.

    Needs the distributions trinity-plugin-kl (``none``, ``k2``) and trinity-plugin-entropy
    (``default``), which this distribution declares as dependencies.
    """

    paper = "https://arxiv.org/abs/1707.06347"
    use_critic = True
    compute_advantage_in_trainer = True
    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": 1,
        "advantage_fn": "ppo",
        "policy_loss_fn": "ppo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
