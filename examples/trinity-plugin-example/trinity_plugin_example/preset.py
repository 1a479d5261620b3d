"""``example``: an algorithm preset naming this distribution's components."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset


class ExamplePreset(AlgorithmPreset):
    """Example: group-normalised advantages with the clipped loss, 4 responses per task, no KL term."""

    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": 4,
        "advantage_fn": "example_group",
        "policy_loss_fn": "example_clip",
        "policy_loss_fn_args": {"clip_range": 0.2},
        "kl_loss_fn": "none",
        "kl_penalty_fn": "none",
        "entropy_loss_fn": "default",
    }
