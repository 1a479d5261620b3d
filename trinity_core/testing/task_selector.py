"""Checks of task selectors: row numbers in range and of the asked count, feedback accepted (NaN too),
randomness only from the given generator, a saved state that resumes the same selection, scalar metrics.

The kit builds the selector for a task set of :data:`SIZE` rows, with a seeded random column for each
name in ``required_columns()``, and feeds back mean rewards in [0, 1] (some NaN) after each draw.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import torch
from torch import Tensor

from trinity_core.testing._core import ConformanceError, Subject, check

__all__ = ["SIZE", "build_selector", "run_selector"]

SIZE = 7
"""Rows of the kit's task set."""
BATCHES = (1, 3, SIZE, SIZE + 2)
"""Rows asked for per draw: one, a few, all, more than there are."""


def build_selector(subject: Subject, generator: torch.Generator) -> Any:
    """The selector on a :data:`SIZE`-row task set, with the columns it reads (seeded random values)."""
    probe = subject.build(size=SIZE, generator=generator)
    wanted = tuple(probe.required_columns())
    if not wanted:
        return probe
    values = torch.Generator().manual_seed(11)
    columns = {key: torch.rand(SIZE, generator=values, dtype=torch.float64) for key in wanted}
    return subject.build(size=SIZE, generator=generator, columns=columns)


def _feedback(n: int, draw: int) -> Tensor:
    values = torch.rand(n, generator=torch.Generator().manual_seed(100 + draw), dtype=torch.float64)
    if n > 1:
        values[0] = torch.nan  # a row none of whose responses was scored
    return values


def run_selector(selector: Any, batches: tuple[int, ...] = BATCHES, start: int = 0) -> list[Tensor]:
    """Draw each of ``batches`` with feedback after each; the rows drawn."""
    drawn = []
    for i, n in enumerate(batches):
        rows = selector.get_indices(n)
        drawn.append(rows.clone() if isinstance(rows, Tensor) else rows)
        if isinstance(rows, Tensor) and rows.shape == (n,):
            selector.update(rows.to(torch.int64), _feedback(n, start + i))
    return drawn


@check("task_selector")
def check_task_selector_indices_in_range(subject: Subject) -> None:
    """get_indices(n) returns n integer row numbers in [0, size), for n of 1, a few, all and more"""
    selector = build_selector(subject, torch.Generator().manual_seed(0))
    for n, rows in zip(BATCHES, run_selector(selector), strict=True):
        problem = None
        if not isinstance(rows, Tensor):
            problem = f"a {type(rows).__name__}"
        elif rows.shape != (n,) or rows.dtype.is_floating_point or rows.dtype == torch.bool:
            problem = f"shape {tuple(rows.shape)} and dtype {rows.dtype}"
        elif int(rows.min()) < 0 or int(rows.max()) >= SIZE:
            problem = f"rows {rows.tolist()}"
        if problem:
            raise ConformanceError(
                f"get_indices({n}) on a task set of {SIZE} rows returned {problem}",
                f"return an int64 tensor of shape ({n},) with values in [0, size) (a row may repeat)",
            )


@check("task_selector")
def check_task_selector_randomness_from_the_generator(subject: Subject) -> None:
    """the same generator seed gives the same rows, whatever torch's global seed"""
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        selector = build_selector(subject, torch.Generator().manual_seed(5))
        runs.append([r.tolist() for r in run_selector(selector)])
    if runs[0] != runs[1]:
        raise ConformanceError(
            "two selectors with the same generator drew different rows when torch's global seed differed",
            "draw every random number from self.generator (the run's task generator, saved in checkpoints)",
        )


def _pickled(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(copy.deepcopy(state), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@check("task_selector")
def check_task_selector_state_resumes_the_selection(subject: Subject) -> None:
    """a selector loaded from state_dict() (saved as a checkpoint saves it) and the generator's state
    continues exactly as the original does"""
    generator = torch.Generator().manual_seed(3)
    original = build_selector(subject, generator)
    run_selector(original)
    state, rng = _pickled(original.state_dict()), generator.get_state()
    expected = [r.tolist() for r in run_selector(original, start=len(BATCHES))]
    resumed_gen = torch.Generator().manual_seed(999)
    resumed = build_selector(subject, resumed_gen)
    resumed.load_state_dict(state)
    resumed_gen.set_state(rng)
    got = [r.tolist() for r in run_selector(resumed, start=len(BATCHES))]
    if got != expected:
        raise ConformanceError(
            f"after load_state_dict the selector drew {got}, the original {expected}",
            "return from state_dict() everything the selection depends on (positions, estimates) and "
            "restore it in load_state_dict()",
        )


@check("task_selector")
def check_task_selector_metrics_are_scalars(subject: Subject) -> None:
    """metrics(rows) gives 0-d tensors or numbers, for the rows just drawn and for no rows"""
    selector = build_selector(subject, torch.Generator().manual_seed(0))
    rows = selector.get_indices(3)
    for indices in (rows, torch.zeros(0, dtype=torch.int64)):
        for key, value in selector.metrics(indices).items():
            ok = isinstance(value, int | float) or (isinstance(value, Tensor) and value.numel() == 1)
            if not ok or not isinstance(key, str):
                raise ConformanceError(
                    f"metrics({indices.tolist()}) has {key!r} = {value!r}",
                    "return {name: 0-d tensor}; they are logged as buffer/taskset/<label>/<name>",
                )
