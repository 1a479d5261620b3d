"""``sapo`` algorithm preset: :class:`SAPOAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["SAPOAlgorithm"]


class SAPOAlgorithm(AlgorithmType):
    """SAPO: GRPO advantages with a smooth temperature-controlled soft gate instead of hard clipping.

    Soft Adaptive Policy Optimization (Gao et al., arXiv:2511.20347). Advantages are group-relative
    (``grpo``, computed in the experience pipeline, hence ``compute_advantage_in_trainer = False``); the
    policy loss is ``sapo`` (:class:`~trinity_plugin_sapo.policy_loss.SAPOPolicyLossFn`); a reference
    model provides the ``k2`` KL loss; no KL penalty on rewards; the default entropy term.

    Needs the distributions trinity-plugin-grpo (``grpo``), trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), which this distribution declares as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2511.20347"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``grpo``, loss ``sapo``, KL penalty ``none``, KL loss ``k2``,
        entropy ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "grpo",
            "policy_loss_fn": "sapo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
