"""Tests of trinity_core.buffer: memory and disk buffers, cursors, atomic publication."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from trinity_core.buffer import DiskReader, DiskWriter, make_buffer
from trinity_core.experience import EID, Experience

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only


def exps(start: int, count: int) -> list[Experience]:
    return [
        Experience(eid=EID(batch=0, task=i), tokens=[1, 2, 3], prompt_length=1, reward=float(i))
        for i in range(start, start + count)
    ]


def tasks(items: list[Experience]) -> list[int | str]:
    return [e.eid.task for e in items]


# ---------------------------------------------------------------------------------------------------
# memory


def test_memory_fifo_batches_and_len():
    writer, reader = make_buffer("memory")

    async def run():
        await writer.write(exps(0, 3))
        await writer.write(exps(3, 4))
        assert len(reader) == 7
        first = await reader.read(batch_size=5)
        rest = await reader.read()
        return first, rest, await reader.read()

    first, rest, empty = asyncio.run(run())
    assert tasks(first) == [0, 1, 2, 3, 4]
    assert tasks(rest) == [5, 6]
    assert empty == []
    assert len(reader) == 0


def test_memory_cursor_state_dict_resumes():
    writer, reader = make_buffer("memory")
    asyncio.run(writer.write(exps(0, 6)))
    asyncio.run(reader.read(batch_size=4))
    state = reader.state_dict()
    assert state == {"current_index": 4}
    asyncio.run(reader.read())
    reader.load_state_dict(state)
    assert tasks(asyncio.run(reader.read())) == [4, 5]
    with pytest.raises(ValueError, match="current_index 99"):
        reader.load_state_dict({"current_index": 99})


def test_memory_read_waits_for_a_writer_and_times_out():
    writer, reader = make_buffer("memory")

    async def run():
        pending = asyncio.ensure_future(reader.read(batch_size=3, timeout=5))
        await asyncio.sleep(0)
        await writer.write(exps(0, 2))
        await asyncio.sleep(0)
        assert not pending.done()
        await writer.write(exps(2, 2))
        got = await pending
        with pytest.raises(TimeoutError, match="1 of 2"):
            await reader.read(batch_size=2, timeout=0.05)
        return got

    assert tasks(asyncio.run(run())) == [0, 1, 2]


def test_memory_release_closes_writer_and_ends_waiting_reads():
    writer, reader = make_buffer("memory")

    async def run():
        assert await writer.acquire() == 1
        assert await writer.acquire() == 2
        await writer.write(exps(0, 2))
        assert await writer.release() == 1
        pending = asyncio.ensure_future(reader.read(batch_size=5))
        await asyncio.sleep(0)
        assert await writer.release() == 0
        got = await pending
        with pytest.raises(RuntimeError, match="closed"):
            await writer.write(exps(2, 1))
        return got

    assert tasks(asyncio.run(run())) == [0, 1]
    assert writer.closed


def test_make_buffer_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown kind"):
        make_buffer("queue")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs path"):
        make_buffer("disk")
    with pytest.raises(ValueError, match="takes no path"):
        make_buffer("memory", tmp_path)
    _, reader = make_buffer("memory")
    with pytest.raises(ValueError, match="batch_size"):
        asyncio.run(reader.read(batch_size=0))


# ---------------------------------------------------------------------------------------------------
# disk


def test_disk_reader_started_after_writes_sees_all_in_order(tmp_path):
    writer, _ = make_buffer("disk", tmp_path / "buf")
    asyncio.run(writer.write(exps(0, 3)))
    asyncio.run(writer.write(exps(3, 2)))
    asyncio.run(writer.write([]))  # nothing to publish
    files = sorted(p.name for p in (tmp_path / "buf").iterdir())
    assert files == ["000000000000.trxp", "000000000001.trxp"]
    reader = DiskReader(tmp_path / "buf")
    assert len(reader) == 5
    got = asyncio.run(reader.read())
    assert tasks(got) == [0, 1, 2, 3, 4]
    assert [e.reward for e in got] == [0.0, 1.0, 2.0, 3.0, 4.0]
    torch.testing.assert_close(got[0].tokens, torch.tensor([1, 2, 3], dtype=torch.int32))


def test_disk_partial_temp_file_is_ignored(tmp_path):
    writer, reader = make_buffer("disk", tmp_path)
    asyncio.run(writer.write(exps(0, 2)))
    # a writer that crashed (or is still writing) leaves a temp file: never visible to readers
    (tmp_path / ".tmp-deadbeef.part").write_bytes(b"TRXP\x01 truncated")
    (tmp_path / "notes.txt").write_text("not a buffer file")
    assert tasks(asyncio.run(reader.read())) == [0, 1]
    asyncio.run(writer.write(exps(2, 1)))
    assert tasks(asyncio.run(reader.read())) == [2]


def test_disk_batches_span_files_and_cursor_resumes_in_new_reader(tmp_path):
    writer, reader = make_buffer("disk", tmp_path)
    for start in (0, 3, 6):
        asyncio.run(writer.write(exps(start, 3)))
    assert tasks(asyncio.run(reader.read(batch_size=4))) == [0, 1, 2, 3]
    state = reader.state_dict()
    assert state == {"file_index": 1, "item_offset": 1, "current_index": 4}
    resumed = DiskReader(tmp_path)
    resumed.load_state_dict(state)
    assert len(resumed) == 5
    assert tasks(asyncio.run(resumed.read(batch_size=4))) == [4, 5, 6, 7]
    assert tasks(asyncio.run(resumed.read())) == [8]


def test_disk_two_writers_never_clobber_and_numbers_stay_contiguous(tmp_path):
    first, second = DiskWriter(tmp_path), DiskWriter(tmp_path)  # both believe 0 is next

    async def run():
        await first.write(exps(0, 1))
        await second.write(exps(1, 1))
        await first.write(exps(2, 1))

    asyncio.run(run())
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{i:012d}.trxp" for i in range(3)]
    assert tasks(asyncio.run(DiskReader(tmp_path).read())) == [0, 1, 2]
    assert not list(Path(tmp_path).glob("*.part"))


def test_disk_read_waits_then_times_out(tmp_path):
    writer, reader = make_buffer("disk", tmp_path)
    reader.poll_interval = 0.01  # type: ignore[attr-defined]

    async def run():
        pending = asyncio.ensure_future(reader.read(batch_size=2, timeout=5))
        await asyncio.sleep(0.02)
        await writer.write(exps(0, 2))
        got = await pending
        with pytest.raises(TimeoutError, match="0 of 1"):
            await reader.read(batch_size=1, timeout=0.03)
        return got

    assert tasks(asyncio.run(run())) == [0, 1]


def test_disk_keeps_advantage_views_written_by_group_computations(tmp_path):
    from trinity_core.components.advantage import write_advantages

    items = exps(0, 3)
    write_advantages(items, torch.tensor([1.0, -2.0, 0.5]))  # views into one flat tensor
    writer, reader = make_buffer("disk", tmp_path)
    asyncio.run(writer.write(items))
    got = asyncio.run(reader.read())
    for src, dst in zip(items, got, strict=True):
        torch.testing.assert_close(dst.advantages, src.advantages)
        torch.testing.assert_close(dst.returns, src.returns)


def test_memory_reader_discards_what_it_has_read() -> None:
    writer, reader = make_buffer("memory")
    items = exps(0, 3)

    async def cycle() -> tuple[list[Experience], list[Experience]]:
        await writer.write(items[:2])
        first = await reader.read()
        assert reader.discard_read() == 2
        await writer.write(items[2:])
        return first, await reader.read()

    first, second = asyncio.run(cycle())
    assert first == items[:2]
    assert second == items[2:]
    assert reader.state_dict() == {"current_index": 1}
    assert len(reader.storage.items) == 1
