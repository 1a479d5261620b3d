"""Checks of replay priority functions: one finite float64 score per stored group (none for none), each
group's score its own (reordering the groups reorders the scores), nothing from torch's global RNG."""

from __future__ import annotations

import torch
from torch import Tensor

from trinity_core.components.priority_fn import ReplayStats
from trinity_core.testing._core import ConformanceError, Subject, check

__all__ = ["kit_stats"]


def kit_stats(groups: int = 6) -> ReplayStats:
    """Statistics of ``groups`` stored groups (versions, uses, rewards varied)."""
    g = torch.arange(groups)
    return ReplayStats(
        version=g // 2,
        use_count=1 + g % 3,
        reward_mean=(g % 4).double() / 4,
        reward_var=((g * 7) % 5).double() / 20,
        seq=g,
        rows=torch.full((groups,), 4),
    )


def _scores(subject: Subject, stats: ReplayStats) -> Tensor:
    scores = subject.build()(stats, 5)
    n = len(stats)
    if not isinstance(scores, Tensor) or scores.shape != (n,) or not scores.dtype.is_floating_point:
        shape = (tuple(scores.shape), scores.dtype) if isinstance(scores, Tensor) else type(scores).__name__
        raise ConformanceError(
            f"for {n} stored groups the priority function returned {shape}",
            "return a float tensor of shape (len(stats),), higher first",
        )
    if n and not bool(torch.isfinite(scores).all()):
        raise ConformanceError(f"scores {scores.tolist()} are not all finite", "return finite scores")
    return scores


@check("priority_fn")
def check_priority_fn_one_finite_score_per_group(subject: Subject) -> None:
    """one finite float score per stored group, and an empty tensor for no group"""
    _scores(subject, kit_stats())
    _scores(subject, kit_stats(0))


@check("priority_fn")
def check_priority_fn_scores_follow_their_groups(subject: Subject) -> None:
    """reordering the stored groups reorders their scores, and torch's global seed changes nothing"""
    stats = kit_stats()
    torch.manual_seed(1)
    base = _scores(subject, stats)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    shuffled = ReplayStats(*(getattr(stats, f)[order] for f in ReplayStats.__dataclass_fields__))
    torch.manual_seed(2)
    moved = _scores(subject, shuffled)
    if not torch.equal(moved, base[order]):
        raise ConformanceError(
            f"scores {base.tolist()}, and for the groups reordered by {order.tolist()}: {moved.tolist()}",
            "score each group from its own statistics (seq says its age), with no randomness",
        )
