"""``opmd`` algorithm preset: :class:`OPMDAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset

__all__ = ["OPMDAlgorithm"]


class OPMDAlgorithm(AlgorithmPreset):
    """OPMD: group-baseline advantages from the experience pipeline with the OPMD policy loss.

    The common preset flags: no critic, a reference model (``k2`` KL loss), advantages in the experience
    pipeline (``opmd`` groups experiences), batch balancing allowed, schema ``experience``. Defaults:
    2 responses per task, advantage and loss ``opmd`` (this distribution), no KL penalty, KL loss ``k2``
    (trinity-plugin-kl), the default entropy term (trinity-plugin-entropy).
    """

    paper = "https://arxiv.org/abs/2501.12599"
    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": 2,
        "advantage_fn": "opmd",
        "policy_loss_fn": "opmd",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
