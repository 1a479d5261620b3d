"""``dapo`` algorithm preset: :class:`DAPOAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset
from trinity_core.components.preset_rules import advantage_placement, no_kl_without_reference
from trinity_plugin_grpo.algorithm import GRPOAlgorithm

__all__ = ["DAPOAlgorithm"]


class DAPOAlgorithm(AlgorithmPreset):
    """DAPO: GRPO group advantages and PPO loss without a reference model or KL term, 16 samples per task.

    Decoupled Clip and Dynamic sAmpling Policy Optimization (Yu et al., arXiv:2503.14476). Flags as in
    trinity-rft 0.6.0: no critic, **no reference model**, advantages in the experience pipeline, batch
    balancing allowed, ``experience`` schema. Defaults: 16 responses per task, advantage ``grpo``, policy
    loss ``ppo``, no KL penalty, no KL loss, the default entropy term.

    As in trinity-rft, the DAPO-specific parts are configured by the user, not by the preset. DAPO as
    the paper runs it (trinity-plugin-buffer provides the two operators; its ``tests/test_dapo_run.py``
    trains this)::

        algorithm:
          algorithm_type: dapo
          policy_loss_fn_args: {clip_range_low: 0.2, clip_range_high: 0.28}   # clip-higher
        rollout:
          experience_pipeline:
            - {name: dynamic_sampling, args: {max_extra_rounds: 3}}  # drop groups without signal and
                                                                     # sample more prompts to refill
            - {name: overlong_penalty, args: {cache_length: 4}}      # soft length penalty, after it

    Once the model solves every group of a step, ``dynamic_sampling`` stops the run (nothing left to
    learn from); ``when_empty: keep`` in its args trains on that step instead.
    Token-level loss is ``loss_agg_mode: token-mean``, the default. ``grpo``'s ``std_threshold: 0.0``
    also drops zero-variance groups, but the step then trains on fewer groups (no over-sampling).

    Its configuration rules reject a trainer-side advantage function and, since there is no reference
    model, a KL loss or KL penalty other than ``none``.
    """

    paper = "https://arxiv.org/abs/2503.14476"
    use_reference = False
    defaults: ClassVar[Mapping[str, Any]] = {
        **GRPOAlgorithm.defaults,
        "repeat_times": 16,
        "kl_loss_fn": "none",
    }
    config_rules = (advantage_placement, no_kl_without_reference)
