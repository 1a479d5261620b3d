"""The buffer contracts: :class:`BufferWriter` and :class:`BufferReader`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Any

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch, GroupLevel
from trinity_core.experience import Experience
from trinity_core.lazy import LazyExperiences

__all__ = ["BufferReader", "BufferWriter", "check_batch_size"]


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
        for). When the range read is exactly one stored batch whose experiences were never made (a
        :class:`LazyExperiences` piece, see :meth:`_read_pieces`), that batch is returned as is: it holds
        every column its experiences would have, and at least the requested group levels and padding.
        """
        pieces = await self._read_pieces(batch_size, timeout)
        if len(pieces) == 1 and isinstance(pieces[0], LazyExperiences) and not pieces[0].materialized:
            batch = pieces[0].batch
            if (
                isinstance(batch, ExperienceBatch)
                and batch.pad_token_id == pad_token_id
                and set(group_levels) <= set(batch.group_index)
            ):
                return batch
        items = [exp for piece in pieces for exp in piece]
        return ExperienceBatch.from_experiences(
            items, pad_token_id=pad_token_id, fields=fields, group_levels=group_levels
        )

    async def _read_pieces(self, batch_size: int | None, timeout: float | None) -> list[Sequence[Experience]]:
        """The experiences :meth:`read_batch` reads, as the pieces the buffer stores them in.

        The default is one list from :meth:`read`; a buffer that stores whole batches overrides it.
        """
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        return [await self.read(batch_size, **kwargs)]

    @abstractmethod
    def __len__(self) -> int:
        """Number of experiences written and not yet read."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The cursor, as a JSON-friendly dict (always with ``current_index``: items read so far)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a cursor saved by :meth:`state_dict`."""


def check_batch_size(batch_size: int | None, where: str) -> None:
    """Raise a ValueError naming ``where`` unless ``batch_size`` is None or positive."""
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"{where}: batch_size must be a positive integer or None, got {batch_size}")
