"""``sapo`` algorithm preset: :class:`SAPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_plugin_grpo import GRPOAlgorithm

from trinity_core.components import AlgorithmPreset

__all__ = ["SAPOAlgorithm"]


class SAPOAlgorithm(AlgorithmPreset):
    """SAPO: GRPO advantages with a smooth temperature-controlled soft gate instead of hard clipping.

    Soft Adaptive Policy Optimization (Gao et al., arXiv:2511.20347). The common preset flags:
    group-relative ``grpo`` advantages computed in the experience pipeline, no critic, a reference model
    for the ``k2`` KL loss. Defaults: 2 responses per task, the ``sapo`` loss
    (:class:`~trinity_plugin_sapo.policy_loss.SAPOPolicyLossFn`) aggregated with
    ``seq-mean-token-mean`` (the paper's per-response mean, which verl 0.9.1 and TRL's
    ``loss_type="sapo"`` always use), no KL penalty on rewards, the default entropy term. The loss
    component's own default stays ``token-mean``; ``algorithm.loss_agg_mode`` or
    ``policy_loss_fn_args.loss_agg_mode`` override the preset's mode (docs/plugins.md, resolution).

    Needs the distributions trinity-plugin-grpo (``grpo``), trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), which this distribution declares as dependencies.
    """

    paper = "https://arxiv.org/abs/2511.20347"
    defaults: ClassVar[Mapping[str, Any]] = {
        **GRPOAlgorithm.defaults,
        "policy_loss_fn": "sapo",
        "policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-mean"},
    }
