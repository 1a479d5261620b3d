"""``gspo`` algorithm preset: :class:`GSPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_grpo import GRPOAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["GSPOAlgorithm"]


class GSPOAlgorithm(AlgorithmPreset):
    """GSPO: GRPO advantages with PPO clipping of the sequence-level importance ratio.

    Group Sequence Policy Optimization (Zheng et al., arXiv:2507.18071). The common preset flags:
    group-relative ``grpo`` advantages computed in the experience pipeline, no critic, a reference model
    for the ``k2`` KL loss. Defaults: 2 responses per task, the ``gspo`` loss
    (:class:`~trinity_plugin_gspo.policy_loss.GSPOLossFn`, whose own ``seq-mean-token-mean`` aggregation
    applies unless the user sets ``algorithm.loss_agg_mode``), no KL penalty on rewards, the default
    entropy term.

    Needs trinity-plugin-grpo (``grpo``), trinity-plugin-kl (``none``, ``k2``) and trinity-plugin-entropy
    (``default``), which this distribution declares as dependencies.
    """

    paper = "https://arxiv.org/abs/2507.18071"
    defaults: ClassVar[Mapping[str, Any]] = {**GRPOAlgorithm.defaults, "policy_loss_fn": "gspo"}
