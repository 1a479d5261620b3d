"""``gspo`` algorithm preset: :class:`GSPOAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["GSPOAlgorithm"]


class GSPOAlgorithm(AlgorithmType):
    """GSPO: GRPO advantages with PPO clipping of the sequence-level importance ratio.

    Group Sequence Policy Optimization (Zheng et al., arXiv:2507.18071). Advantages are group-relative
    (``grpo``, computed in the experience pipeline, hence ``compute_advantage_in_trainer = False``); the
    policy loss is ``gspo`` (:class:`~trinity_plugin_gspo.policy_loss.GSPOLossFn`, whose own
    ``seq-mean-token-mean`` aggregation applies unless the user sets ``algorithm.loss_agg_mode``); a
    reference model provides the ``k2`` KL loss; no KL penalty on rewards; the default entropy term.

    Needs trinity-plugin-grpo (``grpo``), trinity-plugin-kl (``none``, ``k2``) and trinity-plugin-entropy
    (``default``), which this distribution declares as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2507.18071"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``grpo``, loss ``gspo``, KL penalty ``none``, KL loss ``k2``,
        entropy ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "grpo",
            "policy_loss_fn": "gspo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
