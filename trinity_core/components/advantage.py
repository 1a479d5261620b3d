"""Group-relative advantage functions, the group machinery they share with group add strategies, and
the write-back of advantages into experiences. The base class :class:`AdvantageFn` and the
trainer-side :class:`TrainerAdvantage` live in :mod:`trinity_core.components.advantage_fn` (re-exported
here). The API is that of trinity-rft's ``trinity.algorithm.advantage_fn``.

Two ways to write a group-relative computation, both on :class:`GroupComputation`:

* per group (the trinity-rft API): ``group_experiences(exps)`` and
  ``calculate_group_advantage(group_id, exps)``;
  the default :meth:`GroupComputation.process` loops over the groups;
* vectorized: ``process_batch(batch)`` on a columnar :class:`~trinity_core.batch.ExperienceBatch`,
  returning the advantages of the whole batch at once. When a subclass implements it,
  ``supports_batch`` is True and ``process`` uses it; the per-group method stays the reference that
  the conformance kit compares it with.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

import torch
from torch import Tensor

from trinity_core.components.advantage_fn import AdvantageFn, GroupLevel, TrainerAdvantage, make_batch
from trinity_core.components.base import Metrics, aggregate_metrics
from trinity_core.experience import Experience, group_by

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = [
    "AdvantageFn",
    "BatchResult",
    "GroupAdvantage",
    "GroupComputation",
    "GroupLevel",
    "GroupedBatch",
    "TrainerAdvantage",
    "grouped_order",
    "write_advantages",
]

_ACTION_MASK = attrgetter("action_mask")

BatchResult = tuple[Tensor, Metrics] | tuple[Tensor, Metrics, Tensor]
"""What ``process_batch`` returns: ``(advantages, metrics)`` or ``(advantages, metrics, keep)``."""


class GroupedBatch(Protocol):
    """The part of :class:`~trinity_core.batch.ExperienceBatch` that group computations rely on.

    ``rewards`` is ``(N,)`` float64; ``group_index[level]`` is ``(N,)`` int64 numbering the groups of
    that level ``0..num_groups[level]-1`` in order of first appearance.
    """

    rewards: Tensor
    group_index: Mapping[str, Tensor]
    num_groups: Mapping[str, int]


def _response_masks(exps: Sequence[Experience]) -> tuple[list[Tensor], list[int]]:
    return _present_masks(exps, list(map(_ACTION_MASK, exps)))


def _present_masks(exps: Sequence[Experience], masks: list[Tensor | None]) -> tuple[list[Tensor], list[int]]:
    """``masks`` with a None replaced by all-True over the response, and their lengths."""
    try:  # C-level loop; a None mask makes Tensor.numel raise TypeError
        return cast("list[Tensor]", masks), list(map(Tensor.numel, cast("list[Tensor]", masks)))
    except TypeError:
        pass
    present = [
        torch.ones(max(exp.response_length, 0), dtype=torch.bool) if m is None else m
        for exp, m in zip(exps, masks, strict=True)
    ]
    return present, list(map(Tensor.numel, present))


def write_advantages(exps: Sequence[Experience], advantages: Tensor) -> None:
    """Write advantages (and equal returns) into ``exps``, masked by each ``action_mask``.

    ``advantages`` is ``(N,)`` (one score per experience, broadcast over its response) or ``(N, R)``
    (token level, ``R`` at least the longest response). Each experience gets float32 views into a
    ``(2, tokens)`` tensor shared by a block of experiences: ``exp.advantages = score * action_mask``
    (row 0) and ``exp.returns`` an equal copy (row 1, separate memory). A missing ``action_mask``
    counts as all True over the response.
    """
    if len(exps) == 0:
        return
    if advantages.shape[0] != len(exps) or advantages.dim() not in (1, 2):
        raise ValueError(
            f"advantages of shape {tuple(advantages.shape)} do not fit {len(exps)} experiences; expected "
            f"({len(exps)},) or ({len(exps)}, R)"
        )
    values = advantages.detach().to(torch.float32)
    masks: list[Tensor | None] = list(map(_ACTION_MASK, exps))
    if values.dim() == 1 and masks[0] is not None and masks[0].numel() > 0:
        # Usual case: masks of one length. Blocks of rows are stacked without reading each mask's
        # length; a block that does not stack (ragged, a None mask) takes the general path.
        rows = max(1, _WRITE_BLOCK // masks[0].numel())
        for start in range(0, len(exps), rows):
            stop = start + rows
            if not _write_rows(exps[start:stop], masks[start:stop], values[start:stop]):
                block_masks, lengths = _present_masks(exps[start:stop], masks[start:stop])
                _write_block(exps[start:stop], block_masks, lengths, values[start:stop])
        return
    present, lengths = _present_masks(exps, masks)
    if values.dim() == 2 and values.shape[1] < max(lengths):
        raise ValueError(
            f"token-level advantages have width {values.shape[1]} but the longest response has "
            f"{max(lengths)} tokens"
        )
    rows = max(1, _WRITE_BLOCK // max(max(lengths), 1))
    for start in range(0, len(lengths), rows):
        stop = start + rows
        _write_block(exps[start:stop], present[start:stop], lengths[start:stop], values[start:stop])


_WRITE_BLOCK = 1 << 18
"""Tokens per block of :func:`write_advantages`.

Blocks keep the temporaries in cache and each output buffer small enough to be a reused heap block:
one buffer for the whole batch would be fresh pages from the system, faulted in on every call, and
much larger blocks are handed back to the system between calls too.
"""


def _as_factor(mask: Tensor, device: torch.device) -> Tensor:
    """The mask as the factor of the multiply: a bool mask as its 0/1 bytes, anything else as float32.

    The multiply converts uint8 to float32 vectorized, bool not; either way the product is the float32
    ``score * mask``.
    """
    mask = mask.to(device)
    return mask.view(torch.uint8) if mask.dtype == torch.bool else mask.to(torch.float32)


def _set_rows(exps: Sequence[Experience], out: Tensor, sizes: int | list[int]) -> None:
    """``exps[i].advantages`` / ``.returns``: the ``i``-th piece of ``out[0]`` / ``out[1]`` (views)."""
    # One call creates all the pieces.
    advantages, returns = torch.split(out[0], sizes), torch.split(out[1], sizes)
    # map() runs the assignments in a C loop (a Python for loop costs more than the views themselves).
    deque(map(setattr, exps, repeat("advantages"), advantages), maxlen=0)
    deque(map(setattr, exps, repeat("returns"), returns), maxlen=0)


def _write_rows(exps: Sequence[Experience], masks: list[Tensor | None], values: Tensor) -> bool:
    """Write a block whose masks are 1-D of one length; False (nothing written) when they are not."""
    try:
        stacked = torch.stack(masks)  # type: ignore[arg-type]
    except (TypeError, RuntimeError):  # a None mask; masks of different lengths
        return False
    if stacked.dim() != 2 or stacked.shape[1] == 0:
        return False
    device = values.device
    out = torch.empty((2, *stacked.shape), dtype=torch.float32, device=device)
    # One multiply writes both outputs (row 0 advantages, row 1 returns) from one allocation.
    torch.mul(_as_factor(stacked, device), values[None, :, None].expand(2, -1, 1), out=out)
    _set_rows(exps, out.view(2, -1), stacked.shape[1])
    return True


def _write_block(exps: Sequence[Experience], masks: list[Tensor], lengths: list[int], values: Tensor) -> None:
    """:func:`write_advantages` for one block of experiences (``values`` already float32 and checked)."""
    device = values.device
    total = sum(lengths)
    out = torch.empty((2, total), dtype=torch.float32, device=device)
    if total > 0:
        flat = _as_factor(torch.cat(masks), device)
        length_t = torch.tensor(lengths, device=device)
        if values.dim() == 1:
            per_token = values.repeat_interleave(length_t)
        else:
            per_token = values[torch.arange(values.shape[1], device=device)[None, :] < length_t[:, None]]
        torch.mul(flat, per_token[None, :].expand(2, -1), out=out)
    width = lengths[0]
    equal = width > 0 and lengths.count(width) == len(lengths)
    _set_rows(exps, out, width if equal else lengths)


def grouped_order(exps: Sequence[Experience], index: Tensor, keep: Tensor | None = None) -> list[Experience]:
    """``exps`` in the order of the per-group path: by group, stable within, only where ``keep`` is True.

    ``index`` ``(N,)`` numbers the groups by first appearance (``ExperienceBatch.group_index``), so a
    batch whose groups are already contiguous (the usual case) keeps its order without a sort.
    """
    index = index.cpu()
    if keep is None and (len(exps) < 2 or bool((index[1:] >= index[:-1]).all())):
        return list(exps)
    order = torch.argsort(index, stable=True)
    if keep is not None:
        order = order[keep.cpu()[order]]
    return list(map(exps.__getitem__, order.tolist()))


class GroupComputation(ABC):
    """Grouping and per-group / vectorized computation shared by :class:`GroupAdvantage` and
    :class:`~trinity_core.components.add_strategy.GroupAdvantageStrategy`.

    Subclasses set ``group_level`` (default ``"task"``) or override :meth:`group_experiences`, and
    implement :meth:`calculate_group_advantage`; they may add :meth:`process_batch`.
    """

    group_level: ClassVar[GroupLevel] = "task"
    metric_prefix: ClassVar[str] = "group_advantages"
    supports_batch: ClassVar[bool] = False
    """True when the class implements :meth:`process_batch` (set automatically)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.supports_batch = cls.process_batch is not GroupComputation.process_batch

    def group_experiences(self, exps: list[Experience]) -> dict[str, list[Experience]]:
        """Group experiences by ``group_level`` (groups and members in first-appearance order)."""
        return group_by(exps, self.group_level)

    @abstractmethod
    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience]
    ) -> tuple[list[Experience], Metrics]:
        """Compute the advantages of one group; return the (possibly filtered) group and its metrics.

        Set ``exp.advantages`` (response-aligned, zero where ``action_mask`` is False) and
        ``exp.returns``. Metrics are numbers or 0-d tensors; :meth:`process` summarises them over the
        groups with :func:`~trinity_core.components.base.aggregate_metrics`.
        """

    def process_batch(self, batch: ExperienceBatch) -> BatchResult:
        """Vectorized computation over the whole batch (optional).

        Returns ``(advantages, metrics)`` or ``(advantages, metrics, keep)``: ``advantages`` is ``(N,)``
        per experience or ``(N, R)`` per token, ``keep`` an optional ``(N,)`` bool mask of experiences
        to keep, and ``metrics`` the final metric dict (already prefixed, e.g. with
        :func:`~trinity_core.components.base.summarize_metric`). Must agree with the per-group path.
        """
        raise NotImplementedError(f"{type(self).__qualname__} has no vectorized process_batch")

    def batch_fields(self) -> Collection[str] | None:
        """The padded batch columns :meth:`process_batch` reads, or None for all (the default).

        Names from ``"input_ids"`` and :data:`~trinity_core.batch.BATCH_RESPONSE_FIELDS`; rewards,
        lengths and group indices are always there. :meth:`process_vectorized` builds only these, so
        listing fewer makes the list path cheaper (see ``ExperienceBatch.from_experiences(fields=)``).
        """
        return None

    def batch_group_levels(self) -> Collection[GroupLevel]:
        """The ``group_index`` levels :meth:`process_batch` reads (default: all three)."""
        return ("task", "run", "step")

    def columnar_equivalent(self) -> bool:
        """Whether :meth:`process` on a list is exactly :meth:`process_batch` on its batch.

        True when the class implements :meth:`process_batch` and keeps the base :meth:`process` and
        :meth:`process_vectorized`: the result is then ``process_batch``'s advantages written into the
        experiences (masked by each ``action_mask``, returns equal), in group order, filtered by
        ``keep``. A caller that already holds the columns (the trainer) may then compute on them and
        never build the list. Subclasses that override ``process_vectorized`` may return True when
        their override changes nothing for the current arguments.
        """
        cls = type(self)
        return (
            self.supports_batch
            and cls.process is GroupComputation.process
            and cls.process_vectorized is GroupComputation.process_vectorized
        )

    def process(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Compute advantages for all ``exps``; vectorized when ``supports_batch``, else per group.

        Returns the kept experiences, grouped (groups in first-appearance order), and the metrics.
        """
        if len(exps) == 0:
            return [], {}
        if self.supports_batch:
            return self.process_vectorized(exps)
        return self.process_per_group(exps)

    def process_per_group(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """The per-group algorithm of trinity-rft: group, run :meth:`calculate_group_advantage`, flatten."""
        if len(exps) == 0:
            return [], {}
        groups = self.group_experiences(list(exps))
        out: list[Experience] = []
        metric_list = []
        for group_id, group in groups.items():
            kept, metrics = self.calculate_group_advantage(group_id, group)
            out.extend(kept)
            metric_list.append(metrics)
        return out, aggregate_metrics(metric_list, self.metric_prefix)

    def process_vectorized(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Build one batch, call :meth:`process_batch`, write the advantages back, group the output."""
        if len(exps) == 0:
            return [], {}
        levels = {*self.batch_group_levels(), self.group_level}
        batch = make_batch(list(exps), self.batch_fields(), levels)
        result = self.process_batch(batch)
        advantages, metrics = result[0], result[1]
        keep = result[2] if len(result) == 3 else None
        write_advantages(exps, advantages)
        return grouped_order(exps, batch.group_index[self.group_level], keep), metrics


class GroupAdvantage(GroupComputation, AdvantageFn):
    """Group-relative advantages computed in the experience pipeline (``compute_in_trainer()`` False).

    Per-group example (the trinity-rft API)::

        class MeanBaseline(GroupAdvantage):
            \"\"\"A_i = r_i - mean(r) within each task group.\"\"\"

            def calculate_group_advantage(self, group_id, exps, precomputed_std=None):
                rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
                for exp, r in zip(exps, rewards - rewards.mean()):
                    exp.advantages = float(r) * exp.action_mask.float()
                    exp.returns = exp.advantages.clone()
                return exps, {"reward_mean": rewards.mean()}

    Add ``process_batch`` for the vectorized path (see :class:`GroupComputation`).
    """

    def __call__(self, exps: Any, **kwargs: Any) -> tuple[list[Experience], Metrics]:
        """``process(exps)``."""
        return self.process(exps)

    @abstractmethod
    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], precomputed_std: Tensor | None = None
    ) -> tuple[list[Experience], Metrics]:
        """Compute the advantages of one group (``precomputed_std``: a batch-level std, if used)."""

    @classmethod
    def compute_in_trainer(cls) -> bool:
        """Always False: group advantages need whole groups, which the experience pipeline has."""
        return False
