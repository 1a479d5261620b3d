"""``gigpo`` algorithm preset: :class:`GiGPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset

__all__ = ["GiGPOAlgorithm"]


class GiGPOAlgorithm(AlgorithmPreset):
    """GiGPO: group-in-group advantages (``gigpo``) for multi-turn agents with the PPO clipped loss.

    Critic-free (Feng et al., arXiv:2505.10978): episode-level relative advantages plus step-level ones
    over anchor states, computed in the experience pipeline; a reference model for the ``k2`` KL loss;
    8 trajectories per task; no KL penalty; the default entropy term. The component arguments are
    trinity-rft 0.6.0's: ``gigpo`` with ``omega=1, gamma=1, fnorm="none", epsilon=1e-6`` and ``ppo``
    with symmetric clipping ``0.2/0.2`` and ``token-mean``. Needs trinity-plugin-ppo, trinity-plugin-kl
    and trinity-plugin-entropy, declared as dependencies.
    """

    paper = "https://arxiv.org/abs/2505.10978"
    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": 8,
        "advantage_fn": "gigpo",
        "advantage_fn_args": {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
        "policy_loss_fn": "ppo",
        "policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.2, "loss_agg_mode": "token-mean"},
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
