"""Columns of a batch: their names, padding and the checks shared by the ``gather_*`` functions and
:class:`~trinity_core.batch.ExperienceBatch`.

Padding sides, as a trainer consumes the tensors:

* prompts are **left**-padded to ``max_prompt_length`` (every prompt ends at column ``P``);
* responses and every response-aligned field are **right**-padded to ``max_response_length``
  (every response starts at column ``P`` of the token ids, column ``0`` of response tensors).

Every check raises a ValueError that names the caller (``where``) and the offending experience's index:
an experience whose content does not fit (tokens not 1-D, a prompt length outside its tokens, a response
field of the wrong length or missing on some experiences) raises
:class:`~trinity_core.experience.ExperienceError`, which is also an ``AssertionError``; bad arguments and
lengths over a configured limit raise a plain ValueError.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

import torch
from torch import Tensor

from trinity_core.experience import Experience, ExperienceError
from trinity_core.grouping import GroupLevel, group_levels_checked

__all__ = [
    "BATCH_RESPONSE_FIELDS",
    "check_fields",
    "check_limits",
    "first_too_long",
    "gather_field",
    "pad_rows",
    "require_nonempty",
    "response_tensor",
    "scatter_token_ids",
    "token_rows",
]


#: Response-aligned fields that :class:`ExperienceBatch` gathers into ``(N, R)`` tensors.
BATCH_RESPONSE_FIELDS: tuple[str, ...] = (
    "action_mask",
    "logprobs",
    "advantages",
    "returns",
    "token_level_reward",
    "teacher_logprobs",
)


_BATCH_COLUMNS: frozenset[str] = frozenset(("input_ids", *BATCH_RESPONSE_FIELDS))


def check_fields(
    fields: Collection[str] | None, group_levels: Collection[GroupLevel], where: str
) -> frozenset[str]:
    """The columns to build (all when ``fields`` is None); unknown names are a ValueError."""
    wanted = _BATCH_COLUMNS if fields is None else frozenset(fields)
    unknown = sorted(wanted - _BATCH_COLUMNS)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}; choose from {sorted(_BATCH_COLUMNS)}")
    group_levels_checked(group_levels, where)
    return wanted


def _cast(rows: Sequence[Tensor], dtype: torch.dtype) -> list[Tensor]:
    """``rows`` in ``dtype`` (the rows themselves when they all have it, the usual case)."""
    return list(rows) if all(row.dtype == dtype for row in rows) else [row.to(dtype) for row in rows]


def pad_rows(
    rows: Sequence[Tensor],
    width: int,
    pad_value: float | bool,
    dtype: torch.dtype,
    device: torch.device,
    side: Literal["left", "right"] = "right",
) -> Tensor:
    """Stack 1-D ``rows`` (each at most ``width`` long) into ``(len(rows), width)``, padded on ``side``.

    The rows are concatenated once and scattered into a ``pad_value`` tensor under the mask of real
    entries (``masked_scatter_`` fills the mask in row-major order, the order of ``cat``): each value is
    copied once, with a few library calls however many rows there are.
    """
    if not rows:
        return torch.full((0, width), pad_value, dtype=dtype, device=device)
    flat = torch.cat(_cast(rows, dtype)).to(device)
    sizes = [row.numel() for row in rows]
    if width > 0 and sizes.count(width) == len(sizes):  # every row fills the width: nothing to pad
        return flat.view(len(rows), width)
    lengths = torch.tensor(sizes, dtype=torch.int64, device=device)
    col = torch.arange(width, device=device)
    real = col < lengths[:, None] if side == "right" else col >= (width - lengths)[:, None]
    out = torch.full((len(rows), width), pad_value, dtype=dtype, device=device)
    return out.masked_scatter_(real, flat)


def scatter_token_ids(
    tokens: Sequence[Tensor],
    prompts: Sequence[int],
    totals: Sequence[int],
    max_prompt_length: int,
    max_response_length: int,
    pad_token_id: int,
) -> Tensor:
    """``(B, P + R)``: row ``i`` is ``pad * (P - p_i) || tokens_i || pad * (R + p_i - len_i)``.

    As :func:`pad_rows`, with the real tokens of row ``i`` on columns ``[P - p_i, P - p_i + len_i)``.
    The dtype is that of the first row.
    """
    dtype, device = tokens[0].dtype, tokens[0].device
    width = max_prompt_length + max_response_length
    flat = torch.cat(_cast(tokens, dtype)).to(device)
    start = max_prompt_length - torch.tensor(prompts, dtype=torch.int64, device=device)
    stop = start + torch.tensor(totals, dtype=torch.int64, device=device)
    col = torch.arange(width, device=device)
    real = (col >= start[:, None]) & (col < stop[:, None])
    out = torch.full((len(tokens), width), pad_token_id, dtype=dtype, device=device)
    return out.masked_scatter_(real, flat)


def first_too_long(lengths: Sequence[int], limit: int) -> int | None:
    """Index of the first entry of ``lengths`` above ``limit``, or None."""
    return next((i for i, n in enumerate(lengths) if n > limit), None)


def require_nonempty(experiences: Sequence[Experience], where: str) -> None:
    """Raise a ValueError when ``experiences`` is empty."""
    if len(experiences) == 0:
        raise ValueError(f"{where}: got no experiences; pass at least one")


def response_tensor(exp: Experience, index: int, attr_name: str, where: str) -> Tensor:
    """``exp.<attr_name>`` as a 1-D tensor, or a ValueError naming the experience and attribute."""
    try:
        value = getattr(exp, attr_name)
    except AttributeError:
        raise ValueError(f"{where}: Experience has no attribute {attr_name!r}") from None
    if value is None:
        raise ExperienceError(
            f"{where}: experience {index} ({exp.eid.uid}) has {attr_name}=None; set it on every experience "
            f"or leave the field out of the batch"
        )
    if not isinstance(value, Tensor) or value.dim() != 1:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ExperienceError(
            f"{where}: experience {index} has {attr_name} of shape {shape}; a 1-D tensor is needed"
        )
    return value


def token_rows(experiences: Sequence[Experience], where: str) -> tuple[list[Tensor], list[int], list[int]]:
    """Tokens, prompt lengths and total lengths of every experience, validated."""
    tokens: list[Tensor] = []
    for i, exp in enumerate(experiences):
        t = exp.tokens
        if not isinstance(t, Tensor) or t.dim() != 1:
            raise ExperienceError(f"{where}: experience {i} ({exp.eid.uid}) needs 1-D tokens, got {t!r}")
        tokens.append(t)
    prompts = [exp.prompt_length for exp in experiences]
    totals = [t.numel() for t in tokens]
    for i, (p, n) in enumerate(zip(prompts, totals, strict=True)):
        if p < 0 or p > n:
            raise ExperienceError(
                f"{where}: experience {i} has prompt_length={p} but {n} tokens; need 0 <= "
                f"prompt_length <= len(tokens)"
            )
    return tokens, prompts, totals


def check_limits(
    prompts: Sequence[int],
    responses: Sequence[int],
    max_prompt_length: int,
    max_response_length: int,
    where: str,
) -> None:
    """Raise a ValueError for the first prompt or response longer than its limit."""
    bad = first_too_long(prompts, max_prompt_length)
    if bad is not None:
        raise ValueError(
            f"{where}: experience {bad} has a prompt of {prompts[bad]} tokens, longer than "
            f"max_prompt_length={max_prompt_length}; raise the limit or truncate the prompt"
        )
    bad = first_too_long(responses, max_response_length)
    if bad is not None:
        raise ValueError(
            f"{where}: experience {bad} has a response of {responses[bad]} tokens, longer than "
            f"max_response_length={max_response_length}; raise the limit or truncate the response"
        )


def gather_field(
    exps: Sequence[Experience],
    name: str,
    responses: Sequence[int],
    width: int,
    device: torch.device,
    where: str,
) -> Tensor | None:
    """``(N, width)`` column of the response field ``name``, or None when no experience has it.

    The field must be set on every experience or on none, with one entry per response token.
    """
    rows = [getattr(exp, name) for exp in exps]
    missing = sum(r is None for r in rows)
    if missing == len(rows):
        return None
    if missing:
        first = next(i for i, r in enumerate(rows) if r is None)
        raise ExperienceError(
            f"{where}: {name} is set on {len(rows) - missing} experiences but None on {missing} (first: "
            f"index {first}); a batch column needs it on all or none: fill it in or set it to None everywhere"
        )
    for i, (row, n) in enumerate(zip(rows, responses, strict=True)):
        if row.dim() != 1 or row.numel() != n:
            raise ExperienceError(
                f"{where}: experience {i} has {name} of shape {tuple(row.shape)} but a response of "
                f"{n} tokens; response fields need one entry per response token"
            )
    pad: float | bool = False if rows[0].dtype == torch.bool else 0
    return pad_rows(rows, width, pad, rows[0].dtype, device)
