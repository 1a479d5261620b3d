"""Experience buffers: where add strategies write and trainers read (reference section 9).

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
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch, GroupLevel, LazyExperiences
from trinity_core.experience import Experience

__all__ = [
    "BufferPair",
    "BufferReader",
    "BufferWriter",
    "DiskReader",
    "DiskWriter",
    "MemoryReader",
    "MemoryStorage",
    "MemoryWriter",
    "make_buffer",
]


class BufferWriter(ABC):
    """Writes lists of experiences to a buffer.

    ``acquire`` / ``release`` count the users of a writer: ``release`` returns the remaining count, and
    once it reaches 0 after an ``acquire`` the writer is closed and ``write`` raises ``RuntimeError``.
    """

    def __init__(self) -> None:
        self._refs = 0
        self._closed = False

    @abstractmethod
    async def write(self, data: list[Experience]) -> None:
        """Append ``data`` to the buffer as one unit (readers see all of it or none of it)."""

    async def acquire(self) -> int:
        """Register one more user of this writer; return the new count."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} was released by all its users; make a new writer")
        self._refs += 1
        return self._refs

    async def release(self) -> int:
        """Unregister one user; return the remaining count (0 closes the writer)."""
        self._refs = max(self._refs - 1, 0)
        if self._refs == 0:
            self._closed = True
            self._on_close()
        return self._refs

    @property
    def closed(self) -> bool:
        """True once every user released the writer."""
        return self._closed

    async def write_batch(self, batch: ExperienceBatch) -> None:
        """Append the experiences of ``batch`` as one unit (buffers that can store columns override it)."""
        await self.write(list(batch.experiences))

    def _on_close(self) -> None:  # noqa: B027  (an optional hook, not an abstract method)
        """Hook for subclasses, called once when the last user releases the writer."""

    def _check_open(self, data: Sequence[Experience]) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}.write: the writer is closed (all users released it)")
        if not isinstance(data, list | tuple):
            raise TypeError(
                f"{type(self).__name__}.write takes a list of Experience, got {type(data).__name__}"
            )


class BufferReader(ABC):
    """Reads experiences in the order they were written, tracking a cursor."""

    @abstractmethod
    async def read(self, batch_size: int | None = None, **kwargs: Any) -> list[Experience]:
        """Read the next experiences.

        ``batch_size=None`` returns everything written and not yet read (possibly ``[]``). With a
        number, waits until that many are available and returns exactly that many; if the buffer can
        receive no more (its writers closed) the rest is returned, possibly fewer.
        """

    async def read_batch(
        self,
        batch_size: int | None = None,
        timeout: float | None = None,
        *,
        pad_token_id: int = 0,
        fields: Collection[str] | None = None,
        group_levels: Collection[GroupLevel] = GROUP_LEVELS,
    ) -> ExperienceBatch:
        """Read as :meth:`read` does and return the experiences as an :class:`ExperienceBatch`.

        ``pad_token_id``, ``fields`` and ``group_levels`` are passed to
        :meth:`ExperienceBatch.from_experiences` (the batch may hold more columns than ``fields`` asks
        for). Buffers that can hand out stored columns directly override this.
        """
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        items = await self.read(batch_size, **kwargs)
        return ExperienceBatch.from_experiences(
            items, pad_token_id=pad_token_id, fields=fields, group_levels=group_levels
        )

    @abstractmethod
    def __len__(self) -> int:
        """Number of experiences written and not yet read."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The cursor, as a JSON-friendly dict (always with ``current_index``: items read so far)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a cursor saved by :meth:`state_dict`."""


def _check_batch_size(batch_size: int | None, where: str) -> None:
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"{where}: batch_size must be a positive integer or None, got {batch_size}")


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

    async def _wait_for(self, batch_size: int | None, timeout: float | None, where: str) -> int:
        """Wait as :meth:`read` does; return the end of the range to read."""
        _check_batch_size(batch_size, where)
        deadline = None if timeout is None else time.monotonic() + timeout
        while batch_size is not None and len(self) < batch_size and not self.storage.closed:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(
                    f"{where}: {len(self)} of {batch_size} experiences available after {timeout}s"
                )
            await self.storage.wait(remaining)
        size = self.storage.size
        return size if batch_size is None else min(self.current_index + batch_size, size)

    async def read(
        self, batch_size: int | None = None, timeout: float | None = None, **kwargs: Any
    ) -> list[Experience]:
        """See :meth:`BufferReader.read`; ``timeout`` (seconds) raises ``TimeoutError`` when exceeded."""
        end = await self._wait_for(batch_size, timeout, "MemoryReader.read")
        out: list[Experience] = []
        for piece in self.storage.span(self.current_index, end):
            out.extend(piece)
        self.current_index = end
        return out

    async def read_batch(
        self,
        batch_size: int | None = None,
        timeout: float | None = None,
        *,
        pad_token_id: int = 0,
        fields: Collection[str] | None = None,
        group_levels: Collection[GroupLevel] = GROUP_LEVELS,
    ) -> ExperienceBatch:
        """See :meth:`BufferReader.read_batch`. When the range read is exactly one batch written with
        :meth:`MemoryWriter.write_batch` whose experiences were never made, that batch is returned as
        is (it holds every column its experiences would have, and at least the requested group levels
        and padding), so the trainer's batch costs nothing."""
        end = await self._wait_for(batch_size, timeout, "MemoryReader.read_batch")
        pieces = self.storage.span(self.current_index, end)
        if len(pieces) == 1 and isinstance(pieces[0], LazyExperiences) and not pieces[0].materialized:
            batch = pieces[0].batch
            if (
                isinstance(batch, ExperienceBatch)
                and batch.pad_token_id == pad_token_id
                and set(group_levels) <= set(batch.group_index)
            ):
                self.current_index = end
                return batch
        out: list[Experience] = []
        for piece in pieces:
            out.extend(piece)
        self.current_index = end
        return ExperienceBatch.from_experiences(
            out, pad_token_id=pad_token_id, fields=fields, group_levels=group_levels
        )

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


_FILE_SUFFIX = ".trxp"
_FILE_RE = re.compile(r"^(\d{12})\.trxp$")


def _file_name(number: int) -> str:
    return f"{number:012d}{_FILE_SUFFIX}"


def _existing_numbers(directory: Path) -> list[int]:
    numbers = []
    for entry in os.scandir(directory):
        match = _FILE_RE.match(entry.name)
        if match:
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def _publish(tmp: Path, final: Path) -> bool:
    """Move the complete ``tmp`` to ``final`` unless ``final`` exists; return False when it does.

    A hard link is atomic and never replaces an existing file, so two writers (even in two processes)
    cannot claim the same number. Where hard links are unsupported, fall back to ``os.replace`` after an
    existence check (safe for writers within one process, which are serialised by the event loop).
    """
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if final.exists():
            return False
        os.replace(tmp, final)
        return True
    tmp.unlink()
    return True


class DiskWriter(BufferWriter):
    """Writes each ``write`` call as one numbered file in ``directory`` (created if missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        numbers = _existing_numbers(self.directory)
        self._next = numbers[-1] + 1 if numbers else 0

    async def write(self, data: list[Experience]) -> None:
        """Serialize ``data`` to a temporary file, fsync it, then publish it under the next number."""
        self._check_open(data)
        if len(data) == 0:
            return
        from trinity_core.codec import serialize_many

        payload = serialize_many(data)
        tmp = self.directory / f".tmp-{uuid.uuid4().hex}.part"
        with open(tmp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            while not _publish(tmp, self.directory / _file_name(self._next)):
                self._next += 1
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._next += 1


class DiskReader(BufferReader):
    """Reads the numbered files of a :class:`DiskWriter` directory in order.

    The cursor is ``(file_index, item_offset)``: the next file to read and how many of its items were
    already returned. ``poll_interval`` is how often (seconds) ``read`` looks for new files while waiting.
    """

    def __init__(self, directory: str | os.PathLike[str], poll_interval: float = 0.05) -> None:
        self.directory = Path(directory)
        self.poll_interval = poll_interval
        self.file_index = 0
        self.item_offset = 0
        self.current_index = 0
        self._cache: dict[int, list[Experience]] = {}

    def _load(self, number: int) -> list[Experience] | None:
        if number not in self._cache:
            from trinity_core.codec import deserialize_many

            path = self.directory / _file_name(number)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                return None
            self._cache[number] = deserialize_many(data)
        return self._cache[number]

    def _available(self) -> int:
        total = -self.item_offset
        number = self.file_index
        while (items := self._load(number)) is not None:
            total += len(items)
            number += 1
        return max(total, 0)

    def __len__(self) -> int:
        return self._available()

    def _take(self, limit: int | None) -> list[Experience]:
        out: list[Experience] = []
        while limit is None or len(out) < limit:
            items = self._load(self.file_index)
            if items is None:
                break
            want = len(items) - self.item_offset if limit is None else limit - len(out)
            chunk = items[self.item_offset : self.item_offset + want]
            out.extend(chunk)
            self.item_offset += len(chunk)
            if self.item_offset >= len(items):
                self._cache.pop(self.file_index, None)
                self.file_index += 1
                self.item_offset = 0
        self.current_index += len(out)
        return out

    async def read(
        self, batch_size: int | None = None, timeout: float | None = None, **kwargs: Any
    ) -> list[Experience]:
        """See :meth:`BufferReader.read`. Other processes cannot signal that they stopped writing, so with
        a ``batch_size`` the read waits until enough items exist or ``timeout`` (seconds) expires, then
        raises ``TimeoutError``."""
        _check_batch_size(batch_size, "DiskReader.read")
        deadline = None if timeout is None else time.monotonic() + timeout
        while batch_size is not None and self._available() < batch_size:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"DiskReader.read: {self._available()} of {batch_size} experiences available in "
                    f"{self.directory} after {timeout}s"
                )
            await asyncio.sleep(self.poll_interval)
        return self._take(batch_size)

    def state_dict(self) -> dict[str, Any]:
        """``{"file_index", "item_offset", "current_index"}``."""
        return {
            "file_index": self.file_index,
            "item_offset": self.item_offset,
            "current_index": self.current_index,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the cursor saved by :meth:`state_dict`."""
        self.file_index = int(state["file_index"])
        self.item_offset = int(state["item_offset"])
        self.current_index = int(state.get("current_index", 0))
        self._cache.clear()


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
