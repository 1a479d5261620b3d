"""Count host synchronisations: calls that copy a tensor's value to Python or to host memory.

On a GPU each of these waits for every queued kernel; in a loss that runs once per micro-batch they
serialise the whole step. The counter patches the ``torch.Tensor`` methods below for the duration of a
``with`` block and records where each call came from. ``.cpu()`` counts even on a CPU tensor: the same
code on a GPU would synchronise.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["SYNC_METHODS", "SyncLog", "count_host_syncs"]

SYNC_METHODS: tuple[str, ...] = (
    "item",
    "tolist",
    "cpu",
    "numpy",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
)
"""``torch.Tensor`` methods counted as host synchronisations."""

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_KIT_DIR = str(Path(__file__).resolve().parent)


@dataclass
class SyncLog:
    """Host synchronisations seen inside :func:`count_host_syncs`: ``(method, "file:line")`` each."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.calls)

    def describe(self) -> str:
        """One line per distinct call site: ``Tensor.item() at plugin/loss.py:42 (2x)``."""
        counts: dict[tuple[str, str], int] = {}
        for call in self.calls:
            counts[call] = counts.get(call, 0) + 1
        return "\n".join(f"  Tensor.{m}() at {where} ({n}x)" for (m, where), n in counts.items())


def _caller() -> str:
    """The innermost frame outside torch and this kit: the component code that made the call."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        filename = str(Path(frame.filename).resolve())
        if not filename.startswith((_TORCH_DIR, _KIT_DIR)):
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


_MISSING = object()


@contextmanager
def count_host_syncs() -> Iterator[SyncLog]:
    """Patch the :data:`SYNC_METHODS` of ``torch.Tensor`` to record calls; restore them on exit.

    The original methods still run, so the code under test behaves as usual.
    """
    log = SyncLog()
    saved: dict[str, Any] = {}
    for name in SYNC_METHODS:
        original = getattr(torch.Tensor, name, None)
        if original is None:
            continue
        saved[name] = torch.Tensor.__dict__.get(name, _MISSING)
        setattr(torch.Tensor, name, _counting(name, original, log))
    try:
        yield log
    finally:
        for name, previous in saved.items():
            if previous is _MISSING:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, previous)


def _counting(name: str, original: Callable[..., Any], log: SyncLog) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        log.calls.append((name, _caller()))
        return original(self, *args, **kwargs)

    return wrapper
