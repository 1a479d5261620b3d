"""The ``gather_*`` functions: one column of a list of experiences, without building a batch.

:func:`gather_token_ids`, :func:`gather_action_masks`, :func:`gather_attention_masks`,
:func:`gather_response_attrs` and :func:`gather_multi_modal_inputs` keep the signatures of
``trinity.common.experience`` and turn a list of experiences into padded ``(B, T)`` tensors
(padding sides: :mod:`trinity_core.columns`). :func:`gather_group_index`, :func:`gather_group_codes`,
:func:`gather_group_indices` and :func:`gather_rewards` give the group and reward columns of
:class:`~trinity_core.batch.ExperienceBatch` on their own, for components that read nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.columns import (
    check_limits,
    first_too_long,
    pad_rows,
    require_nonempty,
    response_tensor,
    scatter_token_ids,
    token_rows,
)
from trinity_core.experience import Experience, ExperienceError
from trinity_core.grouping import GROUP_LEVELS, GroupLevel, group_columns, group_levels_checked

__all__ = [
    "all_finite",
    "gather_action_masks",
    "gather_attention_masks",
    "gather_group_codes",
    "gather_group_index",
    "gather_group_indices",
    "gather_multi_modal_inputs",
    "gather_response_attrs",
    "gather_rewards",
    "gather_token_ids",
    "reward_columns",
]


def gather_token_ids(
    experiences: Sequence[Experience], max_prompt_length: int, max_response_length: int, pad_token_id: int
) -> Tensor:
    """Token ids of all experiences as ``[B, P + R]``, ``P = max_prompt_length``, ``R = max_response_length``.

    Row ``i`` is ``pad * (P - prompt_length_i) || tokens_i || pad * (R - response_length_i)``: the prompt
    is left-padded so that every response starts at column ``P``; the response is right-padded. The dtype
    is that of the first experience's tokens.

    Raises ValueError when an experience has no tokens, or a prompt longer than ``P`` or a response
    longer than ``R`` (the message names the experience's index).
    """
    where = "gather_token_ids"
    require_nonempty(experiences, where)
    tokens, prompts, totals = token_rows(experiences, where)
    responses = [n - p for p, n in zip(prompts, totals, strict=True)]
    check_limits(prompts, responses, max_prompt_length, max_response_length, where)
    return scatter_token_ids(tokens, prompts, totals, max_prompt_length, max_response_length, pad_token_id)


def gather_action_masks(experiences: Sequence[Experience], max_response_length: int) -> Tensor:
    """Action masks as ``[B, R]`` bool: ``action_mask_i || False * (R - len(action_mask_i))`` (right-padded).

    Raises ValueError when an experience has no ``action_mask`` or one longer than ``R``.
    """
    return gather_response_attrs(experiences, "action_mask", max_response_length, pad_value=0).to(torch.bool)


def gather_attention_masks(
    experiences: Sequence[Experience], max_prompt_length: int, max_response_length: int
) -> Tensor:
    """Attention masks matching :func:`gather_token_ids`: ``[B, P + R]`` bool.

    Row ``i`` is True on columns ``[P - prompt_length_i, P - prompt_length_i + len(tokens_i))`` (the real
    tokens) and False on the padding.
    """
    where = "gather_attention_masks"
    require_nonempty(experiences, where)
    tokens, prompts, totals = token_rows(experiences, where)
    responses = [n - p for p, n in zip(prompts, totals, strict=True)]
    check_limits(prompts, responses, max_prompt_length, max_response_length, where)
    device = tokens[0].device
    start = max_prompt_length - torch.tensor(prompts, dtype=torch.int64, device=device)
    stop = start + torch.tensor(totals, dtype=torch.int64, device=device)
    col = torch.arange(max_prompt_length + max_response_length, device=device)
    return (col >= start[:, None]) & (col < stop[:, None])


def gather_response_attrs(
    experiences: Sequence[Experience], attr_name: str, max_response_length: int, pad_value: int = 0
) -> Tensor:
    """The response-aligned attribute ``attr_name`` of all experiences as ``[B, R]``, right-padded.

    Row ``i`` is ``attr_i || pad_value * (R - len(attr_i))``; the dtype is that of the first experience's
    attribute (the others are cast to it).

    Raises ValueError when an experience lacks the attribute (or has None), when it is not 1-D, or when
    it is longer than ``R``.
    """
    where = f"gather_response_attrs({attr_name!r})"
    require_nonempty(experiences, where)
    rows = [response_tensor(exp, i, attr_name, where) for i, exp in enumerate(experiences)]
    lengths = [len(r) for r in rows]
    bad = first_too_long(lengths, max_response_length)
    if bad is not None:
        raise ValueError(
            f"{where}: experience {bad} has {lengths[bad]} entries, more than "
            f"max_response_length={max_response_length}"
        )
    return pad_rows(rows, max_response_length, pad_value, rows[0].dtype, rows[0].device)


def gather_multi_modal_inputs(experiences: Sequence[Experience]) -> dict[str, Tensor]:
    """Multi-modal inputs of all experiences, concatenated per key along dim 0.

    For every key of the first experience's ``multi_modal_inputs``, the tensors of all experiences are
    joined with ``torch.cat(dim=0)``, the way Hugging Face vision-language processors batch them (e.g.
    ``pixel_values`` ``(n_i, C)`` -> ``(sum n_i, C)``, ``image_grid_thw`` ``(k_i, 3)`` -> ``(sum k_i, 3)``).
    0-d values are stacked into ``(B,)``. The reference returned lists; to split the result per
    experience, use the sizes ``exp.multi_modal_inputs[key].shape[0]``.

    Raises ValueError when an experience has no multi-modal inputs, lacks a key of the first one, or its
    tensor's trailing dimensions differ from the first experience's.
    """
    where = "gather_multi_modal_inputs"
    require_nonempty(experiences, where)
    inputs: list[dict[str, Tensor]] = []
    for i, exp in enumerate(experiences):
        if exp.multi_modal_inputs is None:
            raise ExperienceError(f"{where}: experience {i} ({exp.eid.uid}) has multi_modal_inputs=None")
        inputs.append(exp.multi_modal_inputs)
    out: dict[str, Tensor] = {}
    for key, first in inputs[0].items():
        values: list[Tensor] = []
        for i, mm in enumerate(inputs):
            if key not in mm:
                raise ExperienceError(
                    f"{where}: experience {i} lacks multi-modal key {key!r} of experience 0"
                )
            value = mm[key]
            if value.dim() != first.dim() or value.shape[1:] != first.shape[1:]:
                raise ExperienceError(
                    f"{where}: {key!r} of experience {i} has shape {tuple(value.shape)}, incompatible with "
                    f"{tuple(first.shape)} of experience 0 (all but the first dimension must match)"
                )
            values.append(value)
        out[key] = torch.stack(values) if first.dim() == 0 else torch.cat(values)
    return out


def gather_group_index(
    experiences: Sequence[Experience], level: GroupLevel = "task"
) -> tuple[Tensor, list[str]]:
    """``(index, keys)``: ``ExperienceBatch.group_index[level]`` and ``group_keys[level]``, without a batch.

    ``index`` is ``(N,)`` int64, groups numbered by first appearance; ``keys[g]`` is group ``g``'s id
    (``eid.tid`` / ``rid`` / ``sid`` for ``task`` / ``run`` / ``step``).
    """
    group_levels_checked([level], "gather_group_index")
    index, keys = gather_group_indices(experiences, (level,))
    return index[level], keys[level]


def gather_group_codes(experiences: Sequence[Experience], level: GroupLevel = "task") -> tuple[Tensor, int]:
    """``(index, num_groups)``: :func:`gather_group_index` for callers that only count the groups."""
    group_levels_checked([level], "gather_group_codes")
    index, keys = gather_group_indices(experiences, (level,))
    return index[level], len(keys[level])


def gather_group_indices(
    experiences: Sequence[Experience], levels: Collection[GroupLevel] = GROUP_LEVELS
) -> tuple[dict[str, Tensor], dict[str, list[str]]]:
    """:func:`gather_group_index` for several ``levels`` at once (the EIDs are read once).

    Returns ``ExperienceBatch.group_index`` and ``group_keys`` restricted to ``levels``.
    """
    group_levels_checked(levels, "gather_group_indices")
    return group_columns([exp.eid for exp in experiences], levels)


def reward_columns(raw: Sequence[float | None]) -> tuple[Tensor, Tensor]:
    """``rewards`` (float64, NaN where None) and ``has_reward`` (bool) from the raw rewards."""
    rewards = torch.tensor([math.nan if r is None else float(r) for r in raw], dtype=torch.float64)
    return rewards, torch.tensor([r is not None for r in raw], dtype=torch.bool)


def gather_rewards(experiences: Sequence[Experience]) -> tuple[Tensor, Tensor]:
    """``(rewards, has_reward)``: ``ExperienceBatch.rewards`` (float64, NaN where a reward is None) and
    ``has_reward`` (bool), without a batch."""
    return reward_columns([exp.reward for exp in experiences])


def all_finite(values: Sequence[Any]) -> bool:
    """True when every value is a finite number (None, NaN or inf: False).

    For host-side reward checks: no tensor is made, so nothing waits on a device.
    """
    return all(v is not None and math.isfinite(v) for v in values)
