"""``sppo`` algorithm preset: :class:`sPPOAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["sPPOAlgorithm"]


class sPPOAlgorithm(AlgorithmType):  # seed class name
    """sPPO: OPMD group advantages with the trust-band log-ratio policy gradient, no reference model.

    The reference's sPPO preset (loss after arXiv:2108.05828). Advantages are ``opmd`` (group mean
    baseline, computed in the experience pipeline, hence ``compute_advantage_in_trainer = False``); the
    policy loss is ``sppo`` (:class:`~trinity_plugin_sppo.policy_loss.sPPOPolicyLossFn`); no reference
    model, so neither a KL penalty nor a KL loss (``none``), and no entropy term (``none``).

    Needs trinity-plugin-opmd (``opmd``), trinity-plugin-kl (``none``) and trinity-plugin-entropy
    (``none``), which this distribution declares as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2108.05828"
    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``opmd``, loss ``sppo``, KL penalty ``none``, KL loss ``none``,
        entropy ``none``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "opmd",
            "policy_loss_fn": "sppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }
