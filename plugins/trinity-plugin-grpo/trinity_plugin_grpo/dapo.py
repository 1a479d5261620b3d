"""``dapo`` algorithm preset: :class:`DAPOAlgorithm`."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType
from trinity_plugin_grpo.placement import check_advantage_placement, check_no_reference_kl

__all__ = ["DAPOAlgorithm"]


class DAPOAlgorithm(AlgorithmType):
    """DAPO: GRPO group advantages and PPO loss without a reference model or KL term, 16 samples per task.

    Decoupled Clip and Dynamic sAmpling Policy Optimization (Yu et al., arXiv:2503.14476). Flags as the
    reference (table 1.2): no critic, **no reference model**, advantages in the experience pipeline,
    batch balancing allowed, ``"experience"`` schema. Defaults: ``repeat_times`` 16, advantage ``grpo``,
    policy loss ``ppo``, KL penalty ``none``, KL loss ``none``, entropy ``default``.

    As in the reference, the DAPO-specific parts are configured by the user, not by the preset: clip
    higher (``policy_loss_fn_args``, e.g. ``clip_range_low: 0.2, clip_range_high: 0.28`` as in the
    paper), token-level loss (``loss_agg_mode: token-mean``, the default), dynamic sampling (``grpo``'s
    ``std_threshold: 0.0`` drops zero-variance groups) and overlong reward shaping (a reward function).

    :meth:`check_config` rejects a trainer-side advantage function (see
    :mod:`trinity_plugin_grpo.placement`) and, since there is no reference model, a KL loss or KL
    penalty other than ``none`` (there would be no reference log-probs to compare with).
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2503.14476"
    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 16, advantage ``grpo``, loss ``ppo``, KL penalty and KL loss ``none``, entropy
        ``default``."""
        return {
            "repeat_times": 16,
            "advantage_fn": "grpo",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "default",
        }

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Reject a trainer-side advantage function and any KL term (no reference model)."""
        check_advantage_placement(cls, config)
        check_no_reference_kl(cls, config)
