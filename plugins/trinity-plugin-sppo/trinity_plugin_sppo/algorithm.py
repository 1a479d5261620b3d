"""``sppo`` algorithm preset: :class:`sPPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_opmd import AsymREAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["sPPOAlgorithm"]


class sPPOAlgorithm(AlgorithmPreset):  # trinity-rft's class name
    """sPPO: OPMD group advantages with the trust-band log-ratio policy gradient, no reference model.

    trinity-rft 0.6.0's sPPO preset (loss after arXiv:2108.05828). Flags: no critic, **no reference
    model**, ``opmd`` advantages (group mean baseline) computed in the experience pipeline, batch
    balancing allowed, ``experience`` schema. Defaults: 2 responses per task, the ``sppo`` loss
    (:class:`~trinity_plugin_sppo.policy_loss.sPPOPolicyLossFn`), neither a KL penalty nor a KL loss
    (``none``), no entropy term (``none``).

    Needs trinity-plugin-opmd (``opmd``), trinity-plugin-kl (``none``) and trinity-plugin-entropy
    (``none``), which this distribution declares as dependencies.
    """

    paper = "https://arxiv.org/abs/2108.05828"
    use_reference = False
    defaults: ClassVar[Mapping[str, Any]] = {
        **AsymREAlgorithm.defaults,
        "advantage_fn": "opmd",
        "policy_loss_fn": "sppo",
    }
