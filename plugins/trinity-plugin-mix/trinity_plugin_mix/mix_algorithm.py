"""``mix`` algorithm preset: :class:`MIXAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_grpo import GRPOAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["MIXAlgorithm"]


class MIXAlgorithm(AlgorithmPreset):
    """MIX: GRPO on rollouts plus SFT on expert data in one loss (``mix``), entropy on rollout rows only.

    The common preset flags (GRPO advantages in the experience pipeline, a reference model). Defaults:
    8 responses per task, advantage ``grpo``, the ``mix`` loss, no KL penalty, a ``k2`` KL loss (named
    explicitly: trinity-core's base default is ``none``, trinity-rft's was ``k2``), the ``mix`` entropy
    loss (trinity-plugin-entropy). The trainer must feed batches with ``expert_mask`` (trinity-rft's
    ``mix`` sample strategy, not an algorithm key here); ``trinity train`` mixes rows of
    ``data.expert_path`` in. trinity-rft's ``use_rollout`` flag is never read there and is not defined.
    """

    defaults: ClassVar[Mapping[str, Any]] = {
        **GRPOAlgorithm.defaults,
        "repeat_times": 8,
        "policy_loss_fn": "mix",
        "entropy_loss_fn": "mix",
    }
    conformance_config: ClassVar[dict[str, Any]] = {"data": {"expert_path": "expert.jsonl"}}
    """What every run needs besides the algorithm: expert data (``data.expert_path``, see the README);
    the conformance kit's ``preset_validates`` adds it to the minimal config."""
