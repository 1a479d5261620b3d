"""Task sets read through task selectors: one task set, or several mixed by weight (``tasks.mix``).

Each step's ``n`` prompts are split over the task sets by their weights at that step (a schedule makes a
curriculum): the counts are rounded so that over many steps every task set gets its exact share (the
rounding error is carried to the next step). Each task set's rows are chosen by its selector
(:class:`~trinity_core.components.task_selector.TaskSelector`) among its rows: a ``dataset``'s rows, or
``pool_size`` rows drawn once from a task set that otherwise draws fresh rows every step. After the
rewards, each selector hears how its rows went (:meth:`SelectedTasks.feedback`). The held-out
evaluation reads every task set's own held-out rows, untouched by selection.

A run with one task set, the ``shuffle`` selector and no pool never comes here: the task set itself is
read as it always was (:func:`~trinity_core.train.data.tasks.build_task`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import torch
from torch import Tensor

from trinity_core.components.base import ComponentArgs
from trinity_core.components.faults import call_component
from trinity_core.components.task_selector import TaskSelector
from trinity_core.config.buffer_config import WeightSchedule
from trinity_core.registry import PluginContractError
from trinity_core.train.data.dataset_io import TaskDataError
from trinity_core.train.data.task_base import Task, TaskDraw

__all__ = ["Member", "SelectedTasks", "apportion", "pass_rate_metrics", "weight_at"]


def weight_at(weight: WeightSchedule, step: int) -> float:
    """A task set's weight at ``step``: the number, or the schedule's points linearly interpolated
    (constant before the first point and after the last)."""
    if isinstance(weight, float | int):
        return float(weight)
    steps = [s for s, _ in weight]
    if step <= steps[0]:
        return weight[0][1]
    for (s0, w0), (s1, w1) in pairwise(weight):
        if step <= s1:
            return w0 + (w1 - w0) * (step - s0) / (s1 - s0)
    return weight[-1][1]


def apportion(n: int, shares: Sequence[float], credit: list[float]) -> list[int]:
    """Split ``n`` prompts by ``shares`` (summing to 1) into whole counts; ``credit`` (changed in place)
    carries each task set's rounding error to the next call, so long-run counts follow the shares.

    Each task set is owed ``credit + n * share``; everyone gets the whole part, the rest go to the largest
    fractional parts (ties: the earlier task set).
    """
    owed = [c + n * s for c, s in zip(credit, shares, strict=True)]
    counts = [max(math.floor(o), 0) for o in owed]
    rest = n - sum(counts)
    by_fraction = sorted(range(len(owed)), key=lambda i: (-(owed[i] - counts[i]), i))
    for i in by_fraction[: max(rest, 0)]:
        counts[i] += 1
    while sum(counts) > n:  # only when a credit went negative past a whole prompt
        counts[max(range(len(counts)), key=lambda i: (counts[i] - owed[i], -i))] -= 1
    credit[:] = [o - c for o, c in zip(owed, counts, strict=True)]
    return counts


@dataclass
class Member:
    """One task set of the run, as the selection reads it.

    Attributes:
        label: its name in metrics and messages.
        task: the task set.
        weight: its mixing weight or schedule.
        selector: its task selector (None: a task set that draws fresh rows, read as it always was).
        pool: rows drawn once (``pool_size``), or None for a task set with rows of its own.
        selector_label: the selector in messages (``task selector 'x' from dist 1.0``).
        eval: whether the held-out evaluation includes it.
    """

    label: str
    task: Task
    weight: WeightSchedule
    selector: TaskSelector | None = None
    pool: list[dict[str, Any]] | None = None
    selector_label: str = ""
    eval: bool = True

    @property
    def size(self) -> int:
        """Rows to choose among."""
        return len(self.pool) if self.pool is not None else int(self.task.num_rows())  # type: ignore[attr-defined]

    def rows(self, indices: Tensor) -> list[dict[str, Any]]:
        """The rows at ``indices``."""
        picked = indices.tolist()
        if self.pool is not None:
            return [self.pool[i] for i in picked]
        return list(self.task.rows(picked))  # type: ignore[attr-defined]

    def column(self, key: str) -> list[Any]:
        """Column ``key`` over every row (what a selector's ``required_columns`` names)."""
        if self.pool is None:
            return list(self.task.column(key))  # type: ignore[attr-defined]
        missing = [i for i, row in enumerate(self.pool) if key not in row]
        if missing:
            raise TaskDataError(
                f"task set {self.label!r} has no field {key!r}; its rows have {sorted(self.pool[0])}"
            )
        return [row[key] for row in self.pool]

    def select(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` row numbers from the selector, checked."""
        assert self.selector is not None
        self.selector.generator = generator
        got = call_component("task_selector", self.selector, self.selector.get_indices, n)
        if (
            not isinstance(got, Tensor)
            or got.shape != (n,)
            or got.dtype.is_floating_point
            or got.dtype == torch.bool
        ):
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
            raise PluginContractError(
                f"{self.selector_label} returned {shape} for {n} prompts of task set {self.label!r}; "
                f"get_indices({n}) must return {n} integer row numbers: fix the selector or choose another "
                "(tasks.selector)"
            )
        got = got.to(torch.int64).cpu()
        low, high = (int(got.min()), int(got.max())) if n else (0, 0)
        if low < 0 or high >= self.size:
            raise PluginContractError(
                f"{self.selector_label} returned row {low if low < 0 else high} of task set {self.label!r}, "
                f"which has rows 0..{self.size - 1}; fix the selector or choose "
                "another (tasks.selector)"
            )
        return got


class SelectedTasks(Task):
    """Task sets read through task selectors (built by :func:`~trinity_core.train.data.tasks.build_task`).

    Args:
        members: the task sets, in ``tasks.mix`` order.
        default_reward_fns: the reward functions the task sets default to (all must agree, or the run
            names them).
    """

    Args: ClassVar[type[ComponentArgs]] = ComponentArgs

    def __init__(self, members: list[Member], default_reward_fns: tuple[str, ...]) -> None:
        """Hold the task sets; nothing is drawn yet."""
        super().__init__()
        self.members = members
        self.credit = [0.0] * len(members)
        self.default_reward_fns = default_reward_fns  # type: ignore[misc]
        names: dict[str, None] = {}
        for member in members:
            names.update(dict.fromkeys(member.task.fields))
        self._fields = tuple(names)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field of every task set (``prompt`` first); a row lacking one gets None."""
        return self._fields

    @property
    def conversational(self) -> bool:
        """Whether the prompts are conversations (the task sets agree; checked when built)."""
        return self.members[0].task.conversational

    def alphabet(self) -> str:
        """Every character of every task set."""
        return "".join(dict.fromkeys("".join(m.task.alphabet() for m in self.members)))

    def max_response_tokens(self) -> int:
        """The largest answer budget of the task sets."""
        return max(m.task.max_response_tokens() for m in self.members)

    def _filled(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(self.members) == 1:
            return rows
        return [{**dict.fromkeys(self._fields), **row} for row in rows]

    def counts(self, n: int, step: int) -> list[int]:
        """Prompts per task set for a draw of ``n`` at ``step`` (advances the carried rounding)."""
        weights = [weight_at(m.weight, step) for m in self.members]
        total = sum(weights)
        if not total > 0:
            raise ValueError(
                f"tasks.mix: the weights at step {step} sum to {total}; give a task set weight > 0"
            )
        return apportion(n, [w / total for w in weights], self.credit)

    def draw(self, n: int, generator: torch.Generator, step: int) -> TaskDraw:
        """``n`` rows for step ``step``: each task set's share, chosen by its selector."""
        from trinity_core.train.data.task_base import Pick

        rows: list[dict[str, Any]] = []
        picks: list[Pick] = []
        for i, (member, count) in enumerate(zip(self.members, self.counts(n, step), strict=True)):
            if count == 0:
                continue
            if member.selector is None:
                rows.extend(member.task.sample(count, generator))
                picks.append(Pick(i, count))
                continue
            indices = member.select(count, generator)
            rows.extend(member.rows(indices))
            picks.append(Pick(i, count, indices))
        return TaskDraw(self._filled(rows), picks)

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """``n`` rows as :meth:`draw` gives them at step 0's weights (no feedback)."""
        return self.draw(n, generator, 0).rows

    def feedback(self, draw: TaskDraw, rewards: Tensor) -> dict[str, Tensor]:
        """Tell each selector its rows' mean rewards; metrics ``buffer/taskset/<label>/...`` per task set."""
        values = rewards.to(torch.float64).nanmean(dim=1) if rewards.numel() else rewards.new_zeros(0)
        seen: dict[int, tuple[Tensor, Tensor | None]] = {}
        offset = 0
        for pick in draw.picks:
            seen[pick.member] = (values[offset : offset + pick.count], pick.indices)
            offset += pick.count
        metrics: dict[str, Tensor] = {}
        empty = torch.zeros(0, dtype=torch.int64)
        for i, member in enumerate(self.members):
            mine, indices = seen.get(i, (values.new_zeros(0), None))
            prefix = f"buffer/taskset/{member.label}"
            metrics[f"{prefix}/prompts"] = torch.tensor(float(mine.numel()), dtype=torch.float64)
            metrics[f"{prefix}/reward_mean"] = mine.nanmean() if mine.numel() else torch.tensor(math.nan)
            if member.selector is None:
                continue
            if indices is not None:
                call_component("task_selector", member.selector, member.selector.update, indices, mine)
            for key, value in member.selector.metrics(indices if indices is not None else empty).items():
                metrics[f"{prefix}/{key}"] = torch.as_tensor(value, dtype=torch.float64)
        return metrics

    def eval_rows(self, n: int, seed: int) -> list[dict[str, Any]]:
        """Each evaluated task set's own held-out rows, ``n`` split by the weights at step 0."""
        members = [m for m in self.members if m.eval]
        weights = [weight_at(m.weight, 0) for m in members]
        total = sum(weights)
        shares = [w / total for w in weights] if total > 0 else [1 / len(members)] * len(members)
        counts = apportion(n, shares, [0.0] * len(members))
        rows = [r for m, k in zip(members, counts, strict=True) if k for r in m.task.eval_rows(k, seed)]
        return self._filled(rows)

    def state_dict(self) -> dict[str, Any]:
        """Each task set's and selector's position and the carried rounding."""
        return {
            "credit": list(self.credit),
            "members": [
                {
                    "label": m.label,
                    "task": m.task.state_dict(),
                    "selector": m.selector.state_dict() if m.selector is not None else None,
                }
                for m in self.members
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; another list of task sets is a :class:`TaskDataError`."""
        if not state:
            return
        saved = [m.get("label") for m in state.get("members", [])]
        labels = [m.label for m in self.members]
        if saved != labels:
            raise TaskDataError(
                f"tasks: the checkpoint was written with task sets {saved}, this run has {labels}; resume "
                "with the same tasks section or start a new run"
            )
        self.credit = [float(c) for c in state["credit"]]
        for member, saved_member in zip(self.members, state["members"], strict=True):
            member.task.load_state_dict(saved_member["task"])
            if member.selector is not None and saved_member["selector"] is not None:
                try:
                    member.selector.load_state_dict(saved_member["selector"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise TaskDataError(
                        f"tasks: {member.selector_label} of task set {member.label!r} cannot continue from "
                        f"the checkpoint ({exc}); resume with the same tasks section or start a new run"
                    ) from exc


def pass_rate_metrics(rewards: Tensor, success: float) -> dict[str, Tensor]:
    """``buffer/pass_rate/*`` of a draw's ``(n, G)`` rewards: the mean pass rate (share of each prompt's
    responses with reward >= ``success``), a histogram of the prompts' pass rates (``none`` = 0,
    ``low`` in (0, 0.5), ``high`` in [0.5, 1), ``all`` = 1) and ``zero_variance`` (prompts whose responses
    all scored the same: no group-relative signal)."""
    r = rewards.to(torch.float64)
    scored = ~torch.isnan(r)
    passed = ((r >= success) & scored).sum(1).double()
    rate = passed / scored.sum(1).clamp_min(1).double()
    lo = torch.where(scored, r, torch.inf).amin(1) if r.shape[1] else r.new_zeros(r.shape[0])
    hi = torch.where(scored, r, -torch.inf).amax(1) if r.shape[1] else r.new_zeros(r.shape[0])
    n = max(r.shape[0], 1)

    def share(mask: Tensor) -> Tensor:
        return mask.double().sum() / n

    return {
        "buffer/pass_rate/mean": rate.mean() if r.shape[0] else torch.tensor(math.nan, dtype=torch.float64),
        "buffer/pass_rate_hist/none": share(rate == 0),
        "buffer/pass_rate_hist/low": share((rate > 0) & (rate < 0.5)),
        "buffer/pass_rate_hist/high": share((rate >= 0.5) & (rate < 1)),
        "buffer/pass_rate_hist/all": share(rate == 1),
        "buffer/zero_variance_prompts": share(~(hi > lo)),
    }
