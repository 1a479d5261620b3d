"""``topr`` algorithm preset: :class:`TOPRAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["TOPRAlgorithm"]


class TOPRAlgorithm(AlgorithmType):
    """TOPR: REINFORCE-style rewards with the tapered off-policy (truncated-ratio) policy loss.

    Tapered Off-Policy REINFORCE (Le Roux et al., arXiv:2503.14286). Advantages are the ``reinforce``
    scores of each task group (computed in the experience pipeline, hence
    ``compute_advantage_in_trainer = False``; the reference notes ``grpo`` works too); the policy loss
    is ``topr`` (:class:`~trinity_plugin_topr.policy_loss.TOPRPolicyLossFn`); a reference model provides
    the ``k2`` KL loss; no KL penalty on rewards; the default entropy term.

    Needs trinity-plugin-reinforce (``reinforce``), trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), which this distribution declares as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2503.14286"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``reinforce``, loss ``topr``, KL penalty ``none``, KL loss ``k2``,
        entropy ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "reinforce",
            "policy_loss_fn": "topr",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
