"""Staleness: how many updates ago the policy that sampled each row was, and the rows too old to train on.

The learner's policy *version* is the number of updates it has made; every experience records the
version that sampled it (``info["model_version"]``). A row's staleness is the learner's version minus
the row's; rows more than ``synchronizer.max_staleness`` versions old are dropped before the update.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch, LazyExperiences

__all__ = ["keep_fresh", "row_versions"]


def row_versions(batch: ExperienceBatch, current: int) -> Tensor:
    """The policy version that sampled each row of ``batch`` (``current`` where none was recorded).

    A batch built from a rollout's columns carries one version for all its rows, read without making
    its experiences; otherwise each experience's ``info["model_version"]`` is read.
    """
    exps = batch.experiences
    if isinstance(exps, LazyExperiences) and exps.model_version is not None and not exps.materialized:
        return torch.full((len(batch),), exps.model_version, dtype=torch.int64)
    return torch.tensor([int(e.info.get("model_version", current)) for e in exps], dtype=torch.int64)


def keep_fresh(
    batch: ExperienceBatch, version: int, max_staleness: int | None
) -> tuple[ExperienceBatch | None, dict[str, Tensor]]:
    """``batch`` without the rows sampled more than ``max_staleness`` versions before ``version``.

    Returns the kept batch (None when every row is too old) and the metrics ``staleness/mean``,
    ``staleness/max`` (over the rows read) and ``staleness/dropped`` (rows dropped). With
    ``max_staleness=None`` every row is kept.
    """
    staleness = version - row_versions(batch, version)
    metrics = {
        "staleness/mean": staleness.double().mean(),
        "staleness/max": staleness.max().double(),
        "staleness/dropped": torch.zeros((), dtype=torch.float64),
    }
    if max_staleness is None or int(staleness.max()) <= max_staleness:
        return batch, metrics
    keep = (staleness <= max_staleness).nonzero().flatten().tolist()
    metrics["staleness/dropped"] = torch.tensor(float(len(batch) - len(keep)), dtype=torch.float64)
    if not keep:
        return None, metrics
    kept = ExperienceBatch.from_experiences(
        [batch.experiences[i] for i in keep],
        pad_token_id=batch.pad_token_id,
        group_levels=[level for level in GROUP_LEVELS if level in batch.group_index],
    )
    return kept, metrics
