"""The ``"memory"`` buffer: a FIFO shared by a :class:`MemoryWriter` and a :class:`MemoryReader`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from trinity_core.batch import ExperienceBatch
from trinity_core.buffer.base import BufferReader, BufferWriter, check_batch_size
from trinity_core.experience import Experience
from trinity_core.lazy import LazyExperiences

__all__ = ["MemoryReader", "MemoryStorage", "MemoryWriter"]


class MemoryStorage:
    """The shared FIFO behind a memory writer/reader pair.

    Each write is kept as one chunk, as given: a list of experiences, or the :class:`LazyExperiences`
    of a batch written with :meth:`MemoryWriter.write_batch` (its experiences are not made unless a
    reader asks for experience objects).
    """

    def __init__(self) -> None:
        self.chunks: list[Sequence[Experience]] = []
        self.size = 0
        self.closed = False
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def items(self) -> list[Experience]:
        """Every stored experience, in write order (makes the experiences of lazily built chunks)."""
        return [exp for chunk in self.chunks for exp in chunk]

    def append(self, chunk: Sequence[Experience]) -> None:
        """Store one write."""
        if len(chunk):
            self.chunks.append(chunk)
            self.size += len(chunk)

    def span(self, start: int, end: int) -> list[Sequence[Experience]]:
        """The stored experiences ``start:end`` as pieces of chunks (whole chunks are returned as is)."""
        pieces: list[Sequence[Experience]] = []
        position = 0
        for chunk in self.chunks:  # one entry per write; a consumer that discards keeps this short
            n = len(chunk)
            low, high = max(start - position, 0), min(end - position, n)
            if low < high:
                pieces.append(chunk if low == 0 and high == n else chunk[low:high])
            position += n
            if position >= end:
                break
        return pieces

    def drop_front(self, count: int) -> None:
        """Forget the first ``count`` experiences."""
        kept = self.span(count, self.size)
        self.chunks = kept
        self.size -= count

    def notify(self) -> None:
        """Wake readers waiting for items."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Wait until the next :meth:`notify` or ``timeout`` seconds (no error on timeout)."""
        # A future per wait, not an asyncio.Event: it binds to the running loop, whichever that is.
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(waiter, timeout)


class MemoryWriter(BufferWriter):
    """Appends to a :class:`MemoryStorage`."""

    def __init__(self, storage: MemoryStorage) -> None:
        super().__init__()
        self.storage = storage

    async def write(self, data: list[Experience]) -> None:
        """Append ``data`` (the list is copied; the experiences are not)."""
        self._check_open(data)
        self.storage.append(list(data))
        self.storage.notify()

    async def write_batch(self, batch: ExperienceBatch) -> None:
        """Append the experiences of ``batch``; a lazily built batch is stored without making them."""
        self._check_open([])
        source = batch.experiences
        self.storage.append(source if isinstance(source, LazyExperiences) else list(source))
        self.storage.notify()

    def _on_close(self) -> None:
        self.storage.closed = True
        self.storage.notify()


class MemoryReader(BufferReader):
    """Reads a :class:`MemoryStorage` from a cursor."""

    def __init__(self, storage: MemoryStorage) -> None:
        self.storage = storage
        self.current_index = 0

    def __len__(self) -> int:
        return self.storage.size - self.current_index

    async def _take(
        self, batch_size: int | None, timeout: float | None, where: str
    ) -> list[Sequence[Experience]]:
        """Wait as :meth:`read` does, then return the next range as stored pieces and move the cursor."""
        check_batch_size(batch_size, where)
        deadline = None if timeout is None else time.monotonic() + timeout
        while batch_size is not None and len(self) < batch_size and not self.storage.closed:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(
                    f"{where}: {len(self)} of {batch_size} experiences available after {timeout}s"
                )
            await self.storage.wait(remaining)
        size = self.storage.size
        end = size if batch_size is None else min(self.current_index + batch_size, size)
        pieces = self.storage.span(self.current_index, end)
        self.current_index = end
        return pieces

    async def read(
        self, batch_size: int | None = None, timeout: float | None = None, **kwargs: Any
    ) -> list[Experience]:
        """See :meth:`BufferReader.read`; ``timeout`` (seconds) raises ``TimeoutError`` when exceeded."""
        pieces = await self._take(batch_size, timeout, "MemoryReader.read")
        return [exp for piece in pieces for exp in piece]

    async def _read_pieces(self, batch_size: int | None, timeout: float | None) -> list[Sequence[Experience]]:
        """The stored pieces, so that a batch written whole with :meth:`MemoryWriter.write_batch` and read
        whole comes back as that batch, its experiences never made (:meth:`BufferReader.read_batch`)."""
        return await self._take(batch_size, timeout, "MemoryReader.read_batch")

    def discard_read(self) -> int:
        """Drop the items already read from the storage and restart the cursor at 0; return how many.

        The memory storage keeps every item it was given; a single on-policy consumer, which never
        reads an item twice, calls this after each read to keep memory flat. Do not use it when other
        readers share the storage.
        """
        dropped = self.current_index
        self.storage.drop_front(dropped)
        self.current_index = 0
        return dropped

    def state_dict(self) -> dict[str, Any]:
        """``{"current_index": items read so far}``."""
        return {"current_index": self.current_index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the cursor; it may not point past the items written."""
        index = int(state["current_index"])
        if not 0 <= index <= self.storage.size:
            raise ValueError(
                f"MemoryReader.load_state_dict: current_index {index} is outside "
                f"0..{self.storage.size} (the buffer holds fewer items than the saved state had read)"
            )
        self.current_index = index
