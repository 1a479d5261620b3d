"""Vectorized REC group arithmetic on flat per-experience tensors (no Python loop, no host synchronisation).

Notation for one task group ``g`` of ``n_g`` experiences with rewards ``r_i``:

* first pass: ``μ¹_g = mean(r)``; experience ``i`` is *positive* when ``r_i ≥ μ¹_g``;
  ``pos_g`` / ``neg_g`` count positives and negatives;
* balance drop (``drop="balance"``): when ``neg_g > pos_g``, the ``e_g = neg_g − pos_g`` negatives with the
  smallest drop keys are dropped (keys: :func:`drop_keys`, a seeded hash of each ``eid.uid``, so the
  choice is deterministic and does not depend on the order of the batch);
* second pass over the kept experiences: ``μ_g = mean(r_kept)``, ``σ_g = std_biased(r_kept)``
  (population std, as the reference);
* ``A_i = r_i − μ_g`` (or ``(r_i − μ_g) / (σ_g + ε)`` with ``std_normalize``) for kept experiences and
  ``A_i = 0`` for dropped ones. A deviation of exactly 0 gives exactly 0, so singleton groups (whose mean
  is their reward) and zero-variance groups get ``A = 0``.

Statistics are float64 and use the pivoted two-pass scheme of :mod:`trinity_core.ops.segment`, so equal
rewards give a mean equal to them, bit for bit (the positive/negative split of a flat group is exact).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trinity_core.components.group_kernels import group_ranks
from trinity_core.ops import group_stats, segment_count

__all__ = ["RECScores", "drop_keys", "rec_scores"]


def drop_keys(uids: Sequence[str], seed: int) -> Tensor:
    """``(N,)`` int64 keys ``blake2b(f"{seed}/{uid}")`` (56 bits): the balance drop removes the smallest.

    A key depends only on the seed and the experience's ``uid``: the same experiences are dropped
    whatever the order of the batch or the content of other groups.
    """
    keys = [
        int.from_bytes(hashlib.blake2b(f"{seed}/{uid}".encode(), digest_size=7).digest(), "big")
        for uid in uids
    ]
    return torch.tensor(keys, dtype=torch.int64)


@dataclass(frozen=True, eq=False)
class RECScores:
    """Result of :func:`rec_scores` (``G`` groups, ``N`` experiences).

    Attributes:
        advantages: ``(N,)`` float64 ``A_i``.
        dropped: ``(N,)`` bool, experiences removed by the balance drop.
        group_mean: ``(G,)`` float64 ``μ_g`` (second pass).
        group_std: ``(G,)`` float64 ``σ_g`` (biased, second pass).
        drop_fraction: ``(G,)`` float64 ``e_g / n_g``.
        group_size: ``(G,)`` int64 ``n_g``.
    """

    advantages: Tensor
    dropped: Tensor
    group_mean: Tensor
    group_std: Tensor
    drop_fraction: Tensor
    group_size: Tensor


def rec_scores(
    rewards: Tensor,
    index: Tensor,
    num_groups: int,
    *,
    epsilon: float = 1e-6,
    std_normalize: bool = False,
    keys: Tensor | None = None,
) -> RECScores:
    """REC scores of a whole batch (formulas in the module docstring).

    Args:
        rewards: ``(N,)`` finite rewards (computed in float64).
        index: ``(N,)`` int64 group of each experience in ``[0, num_groups)``.
        num_groups: number of groups ``G``.
        epsilon: added to ``σ_g`` with ``std_normalize``.
        std_normalize: divide by ``σ_g + ε``.
        keys: ``(N,)`` int64 drop keys (:func:`drop_keys`); ``None`` disables the balance drop.
    """
    r = rewards.to(torch.float64)
    idx = index.long()
    size = segment_count(idx, num_groups)
    first = group_stats(r, idx, num_groups)
    positive = r >= first.mean[idx]
    pos = segment_count(idx, num_groups, valid_mask=positive)
    if keys is None:
        extra = torch.zeros_like(size)
        dropped = torch.zeros_like(positive)
    else:
        extra = (size - 2 * pos).clamp_min(0)  # neg − pos, when positive
        segment = 2 * idx + positive.long()  # negatives of group g form segment 2g
        rank = group_ranks(keys.to(idx.device), segment, 2 * num_groups)
        dropped = ~positive & (rank < extra[idx])
    kept = ~dropped
    second = group_stats(r, idx, num_groups, valid_mask=kept)
    deviation = torch.where(kept, r - second.mean[idx], 0.0)
    scores = deviation / (second.std_biased[idx] + epsilon) if std_normalize else deviation
    advantages = torch.where(deviation != 0, scores, 0.0)
    return RECScores(
        advantages=advantages,
        dropped=dropped,
        group_mean=second.mean,
        group_std=second.std_biased,
        drop_fraction=extra.to(torch.float64) / size.clamp_min(1).to(torch.float64),
        group_size=size,
    )
