"""The explorer's log-probs travel with its experiences as the behaviour log-probs (``logprobs``).

The learner hands them to the policy loss as the ``rollout_logprob`` column, so that an off-policy
correction (the ``trinity-plugin-rollout-correction`` plugin) can weigh each token or sequence by
``exp(old_logprob - rollout_logprob)``; mode ``train`` on stored experiences uses them as ``old_logprob``.
"""

from __future__ import annotations

from typing import Any

from trinity_core.batch import ExperienceBatch
from trinity_core.config import ResolvedConfig
from trinity_core.experience import Experience
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
    written: ExperienceBatch | list[Experience], rollout: Rollout, rewards: list[float | None]
) -> None:
    """Set the ``logprobs`` of ``written`` (the rewarded rows of ``rollout``, in order) from the rollout."""
    if rollout.logprobs is None:
        return
    keep = [i for i, r in enumerate(rewards) if r is not None]
    rows = rollout.logprobs.cpu()[keep] if len(keep) < len(rewards) else rollout.logprobs.cpu()
    if isinstance(written, ExperienceBatch):
        written.logprobs = rows[:, : written.max_response_length].contiguous()
        return
    # The list path makes its experiences one by one already; each gets a view of its row.
    for exp, row, length in zip(written, rows, rollout.response_lengths[keep].tolist(), strict=True):
        exp.logprobs = row[:length]
