"""Rows of an :class:`~trinity_core.batch.ExperienceBatch`: a subset (:func:`select_rows`), new rewards
(:func:`replace_rewards`) and several batches as one (:func:`concat_batches`), with the batch's experiences
kept in step.

What experience operators use: a filter returns ``batch.select(keep)``, a reward mapper
``replace_rewards(batch, new)``. A batch built from columns whose experiences were never made stays that
way: the subset gets a :class:`~trinity_core.lazy.LazyExperiences` of its own, which makes only the rows
it holds, their tensors views of the subset's columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from trinity_core.columns import BATCH_RESPONSE_FIELDS
from trinity_core.experience import Experience
from trinity_core.grouping import GROUP_LEVELS
from trinity_core.lazy import LazyExperiences

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["concat_batches", "replace_rewards", "row_numbers", "select_rows"]


def row_numbers(rows: Tensor | Sequence[int], n: int, where: str) -> Tensor:
    """``rows`` as int64 row numbers: a boolean mask of ``n`` entries, or row numbers in ``[0, n)``."""
    rows = torch.as_tensor(rows)
    if rows.dtype == torch.bool:
        if rows.shape != (n,):
            raise ValueError(
                f"{where}: a boolean mask needs {n} entries (one per row), got {tuple(rows.shape)}"
            )
        return rows.nonzero().flatten().cpu()
    if rows.dim() != 1 or rows.dtype.is_floating_point:
        raise ValueError(f"{where}: rows must be a boolean mask or 1-d integer row numbers, got {rows.dtype}")
    rows = rows.to(torch.int64).cpu()
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n):
        raise ValueError(f"{where}: row numbers must lie in [0, {n}), got {rows.min()}..{rows.max()}")
    return rows


def _regroup(index: Tensor, keys: list[str], rows: Tensor) -> tuple[Tensor, list[str]]:
    """The group index of ``rows``, renumbered ``0, 1, ...`` in order of first appearance, and its ids."""
    old = index[rows.to(index.device)]
    if old.numel() == 0:
        return old, []
    position = torch.arange(old.numel(), device=old.device)
    first = torch.full((len(keys),), old.numel(), dtype=torch.int64, device=old.device)
    first.scatter_reduce_(0, old, position, reduce="amin")
    present = (first < old.numel()).nonzero().flatten()
    order = present[torch.argsort(first[present], stable=True)]  # old codes by first appearance
    code = torch.empty(len(keys), dtype=torch.int64, device=old.device)
    code[order] = torch.arange(order.numel(), device=old.device)
    return code[old], [keys[g] for g in order.tolist()]


def _subset_experiences(batch: ExperienceBatch, rows: Tensor) -> Sequence[Experience]:
    """The source experiences of ``rows``: a list, or a lazy list when the batch's were never made."""
    source, picked = batch.experiences, rows.tolist()
    if not isinstance(source, LazyExperiences) or source.materialized:
        return [source[i] for i in picked]
    parent = source

    def make(child: ExperienceBatch) -> list[Experience]:
        made = parent.materialize()
        out = [made[i] for i in picked]
        for name in BATCH_RESPONSE_FIELDS:
            if getattr(child, name) is not None:
                child.write_back(name, out)  # views of the subset's columns, as the source's were
        return out

    return LazyExperiences(len(picked), make, [parent.rewards[i] for i in picked], parent.model_version)


def select_rows(batch: ExperienceBatch, rows: Tensor | Sequence[int]) -> ExperienceBatch:
    """A batch of ``batch``'s rows ``rows`` (a boolean mask or row numbers), in that order.

    Every per-row column is gathered (a copy); the padded widths stay; group indices are renumbered in
    order of first appearance with their ids kept; ``extras`` entries with one row per experience are
    gathered, others kept as they are.
    """
    n = len(batch)
    picked = row_numbers(rows, n, "ExperienceBatch.select")
    index = picked.to(batch.input_ids.device) if not batch.input_ids.is_meta else picked
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, Tensor) and value.dim() >= 1 and value.shape[0] == n and f.name != "input_ids":
            changes[f.name] = value[picked.to(value.device)]
    changes["input_ids"] = (
        torch.empty((picked.numel(), batch.input_ids.shape[1]), dtype=batch.input_ids.dtype, device="meta")
        if batch.input_ids.is_meta
        else batch.input_ids[index]
    )
    changes["extras"] = {
        k: v[picked.to(v.device)] if v.dim() >= 1 and v.shape[0] == n else v for k, v in batch.extras.items()
    }
    group_index, group_keys = {}, {}
    for level, codes in batch.group_index.items():
        group_index[level], group_keys[level] = _regroup(codes, batch.group_keys[level], picked)
    changes.update(group_index=group_index, group_keys=group_keys)
    changes["_lengths"] = [batch._lengths[i] for i in picked.tolist()]
    changes["experiences"] = _subset_experiences(batch, picked)
    child = dataclasses.replace(batch, **changes)
    if isinstance(child.experiences, LazyExperiences) and not child.experiences.materialized:
        child.experiences.attach(child)
    return child


def replace_rewards(batch: ExperienceBatch, rewards: Tensor) -> ExperienceBatch:
    """``batch`` with new rewards (``(N,)``, cast to float64); rows without a reward keep none.

    The experiences follow: made ones get ``reward`` written back, a lazily made list the values it will
    give them. Returns ``batch`` itself (changed in place).
    """
    n = len(batch)
    if rewards.shape != (n,):
        raise ValueError(
            f"replace_rewards: {n} rows need rewards of shape ({n},), got {tuple(rewards.shape)}"
        )
    values = rewards.detach().to(batch.rewards.device, torch.float64)
    batch.rewards = torch.where(batch.has_reward, values, torch.nan)
    source = batch.experiences
    if isinstance(source, LazyExperiences) and not source.materialized:
        present = batch.has_reward.tolist()
        source.rewards = [v if h else None for v, h in zip(batch.rewards.tolist(), present, strict=True)]
    else:
        batch.write_back("reward")
    return batch


def concat_batches(batches: Sequence[ExperienceBatch]) -> ExperienceBatch:
    """The rows of ``batches`` in order, as one batch (built from their experiences; one batch is
    returned as it is). Every batch must have the same ``pad_token_id``."""
    if len(batches) == 1:
        return batches[0]
    if not batches:
        raise ValueError("concat_batches: no batch given")
    pads = {b.pad_token_id for b in batches}
    if len(pads) > 1:
        raise ValueError(f"concat_batches: the batches pad with different token ids {sorted(pads)}")
    levels = [level for level in GROUP_LEVELS if all(level in b.group_index for b in batches)]
    items = [exp for b in batches for exp in b.experiences]
    return type(batches[0]).from_experiences(items, pad_token_id=pads.pop(), group_levels=levels)
