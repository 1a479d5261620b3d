"""Group index of a list of experiences: which task, run or step group each one belongs to.

Experiences are grouped by the ids of their :class:`~trinity_core.experience.EID`: level ``task``
by ``eid.tid`` (``batch/task``), ``run`` by ``eid.rid`` (``batch/task/run``) and ``step`` by
``eid.sid`` (``batch/task/step``). Groups are numbered ``0, 1, ...`` in order of first appearance, the
order of :func:`~trinity_core.experience.group_by`.

Ids are rendered once per distinct raw value, not once per experience: the raw EID components are
numbered first (hashing ints and short strings), then each distinct one is rendered, and raw values that
render alike (``task=3`` and ``task="3"``) are merged into one group, as the EID ids merge them.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Literal, TypeVar

import torch
from torch import Tensor

from trinity_core.experience import EID, escape_id_component

__all__ = ["GROUP_LEVELS", "GroupLevel", "factorize", "group_columns", "group_levels_checked"]

GroupLevel = Literal["task", "run", "step"]
_Key = TypeVar("_Key", bound=Hashable)

#: Grouping levels of :class:`~trinity_core.batch.ExperienceBatch`; each groups by one EID id
#: (``tid``, ``rid``, ``sid``).
GROUP_LEVELS: tuple[GroupLevel, ...] = ("task", "run", "step")


def factorize(keys: Sequence[_Key]) -> tuple[list[int], list[_Key]]:
    """Codes of ``keys`` numbered by first appearance, and the distinct keys in that order.

    >>> factorize(["b", "a", "b"])
    ([0, 1, 0], ['b', 'a'])
    """
    table: dict[_Key, int] = {}
    codes = [table.setdefault(key, len(table)) for key in keys]
    return codes, list(table)


def _child_level(
    parent_codes: list[int], parent_names: list[str], values: Sequence[int | str]
) -> tuple[list[int], list[str]]:
    """Codes and ids of the groups ``parent id/value``: one id per distinct ``(parent, value)`` pair.

    Pairs whose ids render alike (``3`` and ``"3"`` under one parent) share one code.
    """
    pair_codes, pairs = factorize(list(zip(parent_codes, values, strict=True)))
    rendered = [f"{parent_names[p]}/{escape_id_component(v)}" for p, v in pairs]
    name_codes, names = factorize(rendered)
    if len(names) < len(rendered):  # some pairs render alike: map each pair to its merged id
        pair_codes = [name_codes[c] for c in pair_codes]
    return pair_codes, names


def _task_level(eids: Sequence[EID]) -> tuple[list[int], list[str]]:
    """Codes and ``tid`` of the task groups of ``eids``."""
    batch_codes, batches = factorize([eid.batch for eid in eids])
    batch_names = [escape_id_component(b) for b in batches]
    return _child_level(batch_codes, batch_names, [eid.task for eid in eids])


def group_levels_checked(levels: Collection[str], where: str) -> None:
    """Raise a ValueError naming ``where`` when ``levels`` holds a name outside :data:`GROUP_LEVELS`."""
    unknown = sorted(set(levels) - set(GROUP_LEVELS))
    if unknown:
        raise ValueError(f"{where}: unknown group levels {unknown}; choose from {list(GROUP_LEVELS)}")


def group_columns(
    eids: Sequence[EID], levels: Collection[GroupLevel] = GROUP_LEVELS
) -> tuple[dict[str, Tensor], dict[str, list[str]]]:
    """Group index ``(N,)`` int64 and group ids for each of ``levels``.

    Returns ``(index, keys)``: ``index[level][i]`` is the group of ``eids[i]`` and ``keys[level][g]`` the
    id (``tid`` / ``rid`` / ``sid``) of group ``g``, exactly as the EID properties render it.
    """
    task_codes, tids = _task_level(eids)
    index: dict[str, Tensor] = {}
    keys: dict[str, list[str]] = {}
    if "task" in levels:
        index["task"] = torch.tensor(task_codes, dtype=torch.int64)
        keys["task"] = tids
    for level in ("run", "step"):
        if level in levels:
            values = [getattr(eid, level) for eid in eids]
            codes, names = _child_level(task_codes, tids, values)
            index[level] = torch.tensor(codes, dtype=torch.int64)
            keys[level] = names
    return index, keys
