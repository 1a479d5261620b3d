"""What the Clip_B / Clip_V filters share: inputs, the entropy signal, the result and its metrics.

**Masks (docs/reference-differences.md, ``missing-columns``).** The reference multiplies
``response_mask`` by the keep mask, which silently removes the clipped tokens from every later loss term
(KL loss, entropy bonus) as well. Here the batch's ``action_mask`` / ``response_mask`` are left
untouched; a filter

* sets the advantage of every clipped token to 0 (so no policy-gradient loss learns from it, whatever
  mask it aggregates over), and
* stores ``mask ∧ keep`` as ``batch.extras["policy_loss_mask"]`` (:data:`POLICY_LOSS_MASK`, ``(N, R)``
  bool): the mask a trainer passes to the **policy loss** so that clipped tokens also leave its
  normaliser, as in the reference. KL and entropy terms keep the full action mask.

``returns`` are the unfiltered GRPO scores (as in the reference).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import torch
from torch import Tensor

from trinity_core.components import Metrics
from trinity_core.ops import masked_mean, masked_var
from trinity_plugin_clip_filters.grpo import grpo_scores, sequence_rewards

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = [
    "DEGENERATE_STD",
    "ENTROPY_HOW",
    "POLICY_LOSS_MASK",
    "clip_metrics",
    "column",
    "entropy_signal",
    "policy_logprobs",
    "population_stats",
    "scored_signal",
    "store_filter",
    "token_mask",
]

POLICY_LOSS_MASK: Final[str] = "policy_loss_mask"
"""``batch.extras`` key of the ``(N, R)`` bool mask the policy loss should use after filtering."""

DEGENERATE_STD: Final[float] = 1e-12
"""Below this batch std of the signal nothing is clipped (as in the reference)."""

ENTROPY_HOW: Final[str] = (
    "Clip_B needs the per-token entropy of the policy: let the trainer recompute old log-probs "
    "(bypass_old_logprobs=False) and put the entropy in batch.extras['entropys']."
)
"""How to provide the ``entropys`` column, for the ``KeyError`` of a filter that lacks it."""


def token_mask(batch: ExperienceBatch) -> Tensor:
    """``(N, R)`` bool: ``action_mask`` if present, else ``response_mask``."""
    mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
    return mask if mask.dtype == torch.bool else mask != 0


def column(batch: ExperienceBatch, name: str, needed_by: str, how: str) -> Tensor:
    """``batch.column(name)``, or a KeyError saying who needs it and how the trainer provides it."""
    try:
        return batch.column(name, needed_by=needed_by)
    except KeyError as err:
        raise KeyError(f"{err.args[0]} {how}") from None


def policy_logprobs(batch: ExperienceBatch, needed_by: str) -> Tensor:
    """Sampled-token log-probs: ``extras["old_logprobs"]`` (the pass of ``entropys``), else ``logprobs``."""
    old = batch.extras.get("old_logprobs")
    if old is not None:
        return old
    if batch.logprobs is not None:
        return batch.logprobs
    return column(batch, "old_logprobs", needed_by, "Record rollout log-probs or recompute old log-probs.")


def entropy_signal(logprobs: Tensor, entropy: Tensor, mask: Tensor) -> Tensor:
    """``S = p · (H + log p)`` per token in float64, ``p = exp(logprobs)``; 0 at masked positions."""
    lp = torch.where(mask, logprobs.to(torch.float64), 0.0)
    h = torch.where(mask, entropy.to(torch.float64), 0.0)
    return torch.where(mask, lp.exp() * (h + lp), 0.0)


def population_stats(values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and population variance (``/ n``) of ``values`` over the selected tokens (0 when none)."""
    return masked_mean(values, mask), masked_var(values, mask, unbiased=False)


def clip_metrics(clipped: Tensor, mask: Tensor, scores: Tensor) -> Metrics:
    """``frac_clipped``, ``frac_clipped_pos``, ``frac_clipped_neg``: clipped share of the selected tokens
    overall and of those with positive / negative advantage (0 when there are none)."""
    pos = mask & (scores > 0)[:, None]
    neg = mask & (scores < 0)[:, None]

    def share(part: Tensor, whole: Tensor) -> Tensor:
        return (clipped & part).sum().to(torch.float64) / whole.sum().clamp_min(1).to(torch.float64)

    return {
        "frac_clipped": share(mask, mask),
        "frac_clipped_pos": share(pos, pos),
        "frac_clipped_neg": share(neg, neg),
    }


def store_filter(
    batch: ExperienceBatch, mask: Tensor, clipped: Tensor, scores: Tensor
) -> tuple[Tensor, Tensor]:
    """Write :data:`POLICY_LOSS_MASK` and return ``(advantages, returns)`` ``(N, R)`` in float32."""
    batch.extras[POLICY_LOSS_MASK] = mask & ~clipped
    per_token = scores.to(torch.float32)[:, None].expand(mask.shape)
    advantages = torch.where(clipped, 0.0, per_token)
    return advantages, per_token.clone()


def scored_signal(batch: ExperienceBatch, needed_by: str, epsilon: float) -> tuple[Tensor, Tensor, Tensor]:
    """What both filters start from: ``(mask, scores, S)`` on the device of the ``entropys`` column.

    ``mask`` is :func:`token_mask`, ``scores`` the GRPO scores over task groups (``epsilon`` added to the
    group std, :mod:`trinity_plugin_clip_filters.grpo`) and ``S`` the :func:`entropy_signal` of
    :func:`policy_logprobs`. Raises ``KeyError`` (:data:`ENTROPY_HOW`) without ``entropys``.
    """
    entropy = column(batch, "entropys", needed_by, ENTROPY_HOW)
    mask = token_mask(batch).to(entropy.device)
    scores = grpo_scores(
        sequence_rewards(batch), batch.group_index["task"], batch.num_groups["task"], epsilon
    ).to(entropy.device)
    return mask, scores, entropy_signal(policy_logprobs(batch, needed_by), entropy, mask)
