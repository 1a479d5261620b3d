"""Experience buffers: where add strategies write and trainers read.

* :class:`BufferWriter`: ``async write(data)``, ``async acquire()``, ``async release()`` (reference
  counting of writers; a released writer refuses further writes); ``async write_batch(batch)`` for an
  :class:`~trinity_core.batch.ExperienceBatch`.
* :class:`BufferReader`: ``async read(batch_size=None)``, ``len()``, ``state_dict()`` /
  ``load_state_dict()`` (the read cursor, saved with checkpoints so a resumed run continues where it
  stopped); ``async read_batch(...)`` returns the read experiences as an ``ExperienceBatch``.

Built-in buffers, made with :func:`make_buffer`:

* ``"memory"``: a FIFO list shared by a writer and a reader in one process. It keeps every item, so a
  restored cursor can re-read; use it for tests and short runs. A batch written with ``write_batch``
  and read back whole with ``read_batch`` travels as columns: its experiences are never made.
* ``"disk"``: a directory of numbered files ``000000000000.trxp``, one per write, in the pickle-free
  wire format of :mod:`trinity_core.codec`. A write goes to a temporary file first, then is moved into
  place atomically under the next free number, so a reader (in any process) only ever sees complete
  writes, and numbers are contiguous, so reading in numeric order never skips one.

:class:`ReplayBuffer` keeps task groups the learner trained on and hands some back to later steps
(``buffer.replay``; priority functions such as :class:`FifoPriority` choose which).
"""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

from trinity_core.buffer.base import BufferReader, BufferWriter
from trinity_core.buffer.disk import DiskReader, DiskWriter
from trinity_core.buffer.memory import MemoryReader, MemoryStorage, MemoryWriter
from trinity_core.buffer.replay import FifoPriority, ReplayBuffer

__all__ = [
    "BufferPair",
    "BufferReader",
    "BufferWriter",
    "DiskReader",
    "DiskWriter",
    "FifoPriority",
    "MemoryReader",
    "MemoryStorage",
    "MemoryWriter",
    "ReplayBuffer",
    "make_buffer",
]


class BufferPair(NamedTuple):
    """A writer and a reader over the same buffer (unpacks as ``writer, reader``)."""

    writer: BufferWriter
    reader: BufferReader


def make_buffer(kind: Literal["memory", "disk"], path: str | os.PathLike[str] | None = None) -> BufferPair:
    """Create a buffer: ``"memory"`` (no path) or ``"disk"`` (``path``: the directory)."""
    if kind == "memory":
        if path is not None:
            raise ValueError("make_buffer('memory') takes no path; use kind='disk' to store on disk")
        storage = MemoryStorage()
        return BufferPair(MemoryWriter(storage), MemoryReader(storage))
    if kind == "disk":
        if path is None:
            raise ValueError("make_buffer('disk') needs path=<directory> for the buffer files")
        return BufferPair(DiskWriter(path), DiskReader(path))
    raise ValueError(f"make_buffer: unknown kind {kind!r}; use 'memory' or 'disk'")
