"""``mix_chord`` algorithm preset: :class:`MIXCHORDAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_mix.mix_algorithm import MIXAlgorithm

__all__ = ["MIXCHORDAlgorithm"]


class MIXCHORDAlgorithm(MIXAlgorithm):
    """CHORD: MIX with a scheduled SFT weight μ and a φ-weighted SFT term (``mix_chord`` loss).

    As :class:`~trinity_plugin_mix.mix_algorithm.MIXAlgorithm` with the ``mix_chord`` loss: GRPO
    advantages in the pipeline, no KL penalty, KL loss ``k2`` (explicit), entropy ``mix``, 8 responses
    per task. The trainer must feed ``expert_mask`` and ``step`` per row.
    """

    paper = "https://arxiv.org/abs/2508.11408"
    defaults: ClassVar[Mapping[str, Any]] = {**MIXAlgorithm.defaults, "policy_loss_fn": "mix_chord"}
