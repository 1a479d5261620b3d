"""``on_policy_distill`` and ``jsd`` algorithm presets (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["JSDAlgorithm", "OnPolicyDistillAlgorithm"]


class OnPolicyDistillAlgorithm(AlgorithmType):
    """On-policy distillation: advantages teacher - student log-probs in the trainer, PPO-clip loss.

    Flags as seed 002: no critic, no reference model (the teacher is not the reference: its log-probs
    come with the experiences, ``Experience.teacher_logprobs``), advantages computed in the trainer,
    batch balancing allowed, ``experience`` schema. Defaults (reference table 1.2): 8 responses per
    prompt, advantage ``on_policy_distill`` (``kl_coef`` 1.0), loss ``ppo`` (``importance_sampling``
    when no clipping is wanted; both from trinity-plugin-ppo), no KL penalty, no KL loss, no entropy
    term (``none`` from trinity-plugin-kl and trinity-plugin-entropy).
    """

    paper: ClassVar[str | None] = "https://thinkingmachines.ai/blog/on-policy-distillation/"
    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = True
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 8, ``on_policy_distill`` (kl_coef 1.0), ``ppo``, KL and entropy ``none``."""
        return {
            "repeat_times": 8,
            "advantage_fn": "on_policy_distill",
            "advantage_fn_args": {"kl_coef": 1.0},
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }


class JSDAlgorithm(AlgorithmType):
    """JSD distillation: the on-policy distillation preset with the ``jsd`` advantage surrogate.

    Same flags as :class:`OnPolicyDistillAlgorithm` (reference table 1.2; not in seed 002): advantage
    ``jsd`` (``kl_coef`` 1.0, ``lambda_coef`` 0.5), loss ``ppo``, no KL penalty or loss, no entropy term,
    8 responses per prompt.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2306.13649"
    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = True
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 8, ``jsd`` (kl_coef 1.0, lambda_coef 0.5), ``ppo``, KL and entropy ``none``."""
        return {
            "repeat_times": 8,
            "advantage_fn": "jsd",
            "advantage_fn_args": {"kl_coef": 1.0, "lambda_coef": 0.5},
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }
