"""Checks of add strategies: ``await strategy.add(experiences, step) -> (written, metrics)``, writing
through the buffer writer it was built with (a memory buffer here). Group add strategies also get the
group checks of :mod:`trinity_core.testing.advantage_fn`."""

from __future__ import annotations

import asyncio
from typing import Any

from torch import Tensor

from trinity_core.buffer import make_buffer
from trinity_core.experience import Experience
from trinity_core.testing._core import ConformanceError, Subject, check
from trinity_core.testing._inputs import GROUP_SIZE, group_experiences
from trinity_core.testing.common import BUILT

__all__: list[str] = []


def _check_result(result: Any, what: str) -> tuple[int, dict[str, Any]]:
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ConformanceError(
            f"{what} returned {result!r}, not a tuple (number written, metrics)",
            "return (len(written), metrics) from add",
        )
    count, metrics = result
    if isinstance(count, bool) or not isinstance(count, int):
        raise ConformanceError(
            f"{what} returned {count!r} as the number written, not an int", "return len(written) as an int"
        )
    if not isinstance(metrics, dict):
        raise ConformanceError(f"{what} returned metrics {metrics!r}, not a dict", "return a metrics dict")
    for key, value in metrics.items():
        numeric = isinstance(value, int | float) or (isinstance(value, Tensor) and value.numel() == 1)
        if not numeric:
            raise ConformanceError(
                f"{what}: metric {key!r} is {type(value).__name__}, not a number or 0-d tensor",
                "return scalar metrics (0-d tensors preferred)",
            )
    return count, metrics


@check("add_strategy", requires=BUILT)
def check_add_writes_through_writer(subject: Subject) -> None:
    """add writes the kept experiences through the writer and returns (int, dict)"""
    writer, reader = make_buffer("memory")
    strategy = subject.build(writer=writer)
    rewards = [[float(g * GROUP_SIZE + j) / 7 for j in range(GROUP_SIZE)] for g in range(3)]
    exps = group_experiences(rewards, seed=3, level=str(getattr(subject.obj, "group_level", "task")))
    count, _ = _check_result(asyncio.run(strategy.add(exps, 1)), "add(experiences, step=1)")
    written = asyncio.run(reader.read())
    if count != len(written):
        raise ConformanceError(
            f"add reported {count} experiences written but the buffer received {len(written)}",
            "write every kept experience with `await self.writer.write(kept)` and return len(kept)",
        )
    if count > len(exps) and not getattr(subject.obj, "may_duplicate", False):
        raise ConformanceError(
            f"add wrote {count} experiences from {len(exps)}",
            "write each kept experience once, or declare may_duplicate = True if duplicating is the method",
        )
    bad = [type(e).__name__ for e in written if not isinstance(e, Experience)]
    if bad:
        raise ConformanceError(f"add wrote {bad[:3]} items, not Experience", "write Experience objects")
    count, _ = _check_result(asyncio.run(strategy.add([], 2)), "add([], step=2)")
    leftover = asyncio.run(reader.read())
    if count != 0 or leftover:
        raise ConformanceError(
            f"add([]) reported {count} and wrote {len(leftover)} experiences",
            "return (0, {}) for an empty list without writing",
        )
