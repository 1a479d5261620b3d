"""The ``"disk"`` buffer: numbered files in the wire format of :mod:`trinity_core.codec`, one per write."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

from trinity_core.buffer.base import BufferReader, BufferWriter, check_batch_size
from trinity_core.experience import Experience

__all__ = ["DiskReader", "DiskWriter"]


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
        check_batch_size(batch_size, "DiskReader.read")
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
