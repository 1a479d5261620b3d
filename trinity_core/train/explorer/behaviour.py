"""The explorer's log-probs travel with its experiences as the behaviour log-probs (``logprobs``).

The learner hands them to the policy loss as the ``rollout_logprob`` column, so that an off-policy
correction (the ``trinity-plugin-rollout-correction`` plugin) can weigh each token or sequence by
``exp(old_logprob - rollout_logprob)``; mode ``train`` on stored experiences uses them as ``old_logprob``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity_core.batch import ExperienceBatch, LazyExperiences
from trinity_core.config import ResolvedConfig
from trinity_core.lm.sampling import Rollout

__all__ = ["attach_behaviour_logprobs", "wants_behaviour_logprobs"]


def wants_behaviour_logprobs(config: ResolvedConfig, components: Any) -> bool:
    """Whether anything reads the explorer's log-probs: a policy loss that asks for ``rollout_logprob``,
    or mode ``explore``, whose stored experiences a later mode ``train`` reads as ``old_logprob``.

    Asked for only then: ``generate`` keeps every step's logits over the whole vocabulary to compute them.
    """
    loss = components.policy_loss
    reads = any(loss.mapper.to_trinity(key) == "rollout_logprob" for key in loss.select_keys)
    return reads or config.mode == "explore"


def attach_behaviour_logprobs(
    batch: ExperienceBatch, rollout: Rollout, rewards: Sequence[float | None]
) -> None:
    """Set the ``logprobs`` of ``batch`` (the rewarded rows of ``rollout``, in order) from the rollout;
    experiences of the batch that exist already get views of their rows."""
    if rollout.logprobs is None:
        return
    keep = [i for i, r in enumerate(rewards) if r is not None]
    rows = rollout.logprobs.cpu()[keep] if len(keep) < len(rewards) else rollout.logprobs.cpu()
    batch.logprobs = rows[:, : batch.max_response_length].contiguous()
    made = batch.experiences
    if not isinstance(made, LazyExperiences) or made.materialized:
        batch.write_back("logprobs")
