"""``cispo`` algorithm preset: :class:`CISPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_grpo import GRPOAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["CISPOAlgorithm"]


class CISPOAlgorithm(AlgorithmPreset):
    """CISPO: GRPO advantages with a clipped importance-sampling weight that keeps every token's gradient.

    Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv:2506.13585). The common preset flags: no
    critic, a reference model for the ``k2`` KL loss, group-relative ``grpo`` advantages computed in the
    experience pipeline, batch balancing allowed, ``experience`` schema. Defaults: 2 responses per task,
    the ``cispo`` loss (:class:`~trinity_plugin_cispo.policy_loss.CISPOPolicyLossFn`), no KL penalty on
    rewards, the default entropy term.

    Needs trinity-plugin-grpo (``grpo``), trinity-plugin-kl (``none``, ``k2``) and trinity-plugin-entropy
    (``default``), which this distribution declares as dependencies.
    """

    paper = "https://arxiv.org/abs/2506.13585"
    defaults: ClassVar[Mapping[str, Any]] = {**GRPOAlgorithm.defaults, "policy_loss_fn": "cispo"}
