"""``asymre`` algorithm preset: :class:`AsymREAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset
from trinity_plugin_opmd.opmd_algorithm import OPMDAlgorithm

__all__ = ["AsymREAlgorithm"]


class AsymREAlgorithm(AlgorithmPreset):
    """AsymRE: shifted group-mean baselines from the experience pipeline with the OPMD policy loss.

    Flags: no critic, **no reference model**, advantages in the experience pipeline (``asymre`` groups
    experiences), batch balancing allowed, schema ``experience``. Defaults: 2 responses per task,
    advantage ``asymre`` and loss ``opmd`` (this distribution), no KL penalty, no KL loss
    (trinity-plugin-kl), no entropy term (trinity-plugin-entropy).
    """

    paper = "https://arxiv.org/abs/2506.20520"
    use_reference = False
    defaults: ClassVar[Mapping[str, Any]] = {
        **OPMDAlgorithm.defaults,
        "advantage_fn": "asymre",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }
