"""Balanced batches across data-parallel ranks (verl's ``balance_batch``), whole task groups at a time.

Each rank samples its own prompts, so the ranks' batches can differ a lot in tokens, and the slowest rank
sets the pace of every optimizer step. Where the algorithm preset allows it (``can_balance_batch``) and
``trainer.balance_batch`` is on, the learner gathers every rank's experiences, gives each task group
(``eid.tid``, the group of GRPO-like advantages) to one rank so that the ranks get about the same number
of tokens, and trains on its share. The loss is normalised by the counts of the whole step over all
ranks (``global_normalizers``), so the gradient does not depend on which rank holds which row.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch
from trinity_core.config import ResolvedConfig
from trinity_core.experience import Experience
from trinity_core.grouping import GroupLevel

__all__ = ["assign_groups", "balance_batch", "balance_experiences", "balances"]


def balances(config: ResolvedConfig, preset: Any, num_processes: int) -> bool:
    """Whether the learner balances its batches: several ranks, the preset's ``can_balance_batch`` and
    ``trainer.balance_batch``."""
    return num_processes > 1 and config.trainer.balance_batch and bool(preset.can_balance_batch)


def assign_groups(group_tokens: Sequence[int], world: int) -> list[int]:
    """The rank of each group: largest groups first, each to the rank with the fewest tokens so far (the
    lower rank on a tie). Deterministic, so every rank computes the same assignment."""
    order = sorted(range(len(group_tokens)), key=lambda g: (-group_tokens[g], g))
    loads = [(0, rank) for rank in range(world)]
    ranks = [0] * len(group_tokens)
    for g in order:
        load, rank = heapq.heappop(loads)
        ranks[g] = rank
        heapq.heappush(loads, (load + group_tokens[g], rank))
    return ranks


def balance_experiences(
    per_rank: Sequence[Sequence[Experience]], world: int
) -> tuple[list[list[Experience]], list[int]]:
    """Every rank's experiences (``per_rank[r]``) regrouped into ``world`` shares of about equal tokens.

    A task group never splits; within a share the rows keep their gathered order. Returns the shares
    and their token counts (prompt + response tokens).
    """
    flat = [exp for rows in per_rank for exp in rows]
    keys = list(dict.fromkeys(exp.eid.tid for exp in flat))
    index = {key: i for i, key in enumerate(keys)}
    group_of = [index[exp.eid.tid] for exp in flat]
    sizes = torch.tensor([_size(exp) for exp in flat], dtype=torch.int64)
    group_tokens = torch.zeros(len(keys), dtype=torch.int64).index_add_(0, torch.tensor(group_of), sizes)
    rank_of_group = assign_groups(group_tokens.tolist(), world)
    shares: list[list[Experience]] = [[] for _ in range(world)]
    for exp, g in zip(flat, group_of, strict=True):
        shares[rank_of_group[g]].append(exp)
    loads = [sum(_size(exp) for exp in share) for share in shares]
    return shares, loads


def _size(exp: Experience) -> int:
    """Tokens of ``exp`` (prompt and response)."""
    return 0 if exp.tokens is None else int(exp.tokens.numel())


def balance_batch(
    batch: ExperienceBatch,
    accelerator: Any,
    *,
    pad_token_id: int,
    group_levels: Collection[GroupLevel] = GROUP_LEVELS,
) -> tuple[ExperienceBatch, dict[str, Tensor]]:
    """This rank's share of the balanced batch of all ranks, and metrics of the balance (tokens on this
    rank before and after, and the ratio of the largest rank's tokens to the mean after)."""
    from accelerate.utils import gather_object

    device = batch.input_ids.device
    mine = batch.to(torch.device("cpu")).to_experiences()
    per_rank: list[list[Experience]] = gather_object([mine])
    shares, loads = balance_experiences(per_rank, accelerator.num_processes)
    share = shares[accelerator.process_index]
    balanced = ExperienceBatch.from_experiences(share, pad_token_id=pad_token_id, group_levels=group_levels)
    mean = sum(loads) / len(loads)
    metrics = {
        "balance/tokens_before": torch.tensor(float(sum(_size(e) for e in mine))),
        "balance/tokens_after": torch.tensor(float(loads[accelerator.process_index])),
        "balance/max_over_mean": torch.tensor(max(loads) / mean if mean else 1.0),
    }
    return balanced.to(device), metrics
