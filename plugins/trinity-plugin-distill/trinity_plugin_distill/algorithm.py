"""``on_policy_distill`` and ``jsd`` algorithm presets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset

__all__ = ["JSDAlgorithm", "OnPolicyDistillAlgorithm"]


class OnPolicyDistillAlgorithm(AlgorithmPreset):
    """On-policy distillation: advantages teacher - student log-probs in the trainer, PPO-clip loss.

    Flags: no critic, no reference model (the teacher is not the reference: its log-probs come with the
    experiences, ``Experience.teacher_logprobs``, or from ``model.teacher_path`` in ``trinity train``),
    advantages computed in the trainer, batch balancing allowed, ``experience`` schema. Defaults, as in
    trinity-rft 0.6.0: 8 responses per prompt, advantage ``on_policy_distill`` (``kl_coef`` 1.0), loss
    ``ppo`` (``importance_sampling`` when no clipping is wanted; both from trinity-plugin-ppo), no KL
    penalty, no KL loss, no entropy term (``none`` from trinity-plugin-kl and trinity-plugin-entropy).
    """

    paper = "https://thinkingmachines.ai/blog/on-policy-distillation/"
    use_reference = False
    compute_advantage_in_trainer = True
    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": 8,
        "advantage_fn": "on_policy_distill",
        "advantage_fn_args": {"kl_coef": 1.0},
        "policy_loss_fn": "ppo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }
    conformance_config: ClassVar[dict[str, Any]] = {"model": {"teacher_path": "teacher"}}
    """What every run needs besides the algorithm: a teacher (``model.teacher_path``, see the README);
    the conformance kit's ``preset_validates`` adds it to the minimal config."""


class JSDAlgorithm(OnPolicyDistillAlgorithm):
    """JSD distillation: the on-policy distillation preset with the ``jsd`` advantage surrogate.

    The flags of :class:`OnPolicyDistillAlgorithm` (trinity-rft 0.6.0 defines this preset but its
    published algorithm API does not list it): advantage ``jsd`` (``kl_coef`` 1.0, ``lambda_coef``
    0.5), loss ``ppo``, no KL penalty or loss, no entropy term, 8 responses per prompt.
    """

    paper = "https://arxiv.org/abs/2306.13649"
    defaults: ClassVar[Mapping[str, Any]] = {
        **OnPolicyDistillAlgorithm.defaults,
        "advantage_fn": "jsd",
        "advantage_fn_args": {"kl_coef": 1.0, "lambda_coef": 0.5},
    }
