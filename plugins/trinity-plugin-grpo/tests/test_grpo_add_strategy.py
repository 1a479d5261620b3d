"""The ``grpo`` add strategy: GRPO advantages of one explore step, written with one buffer write."""

from __future__ import annotations

import asyncio
import math

import pydantic
import pytest
import torch
from grpo_support import interleave, make_group_exps, scores
from trinity_plugin_grpo import GRPOAddStrategy, GRPOGroupedAdvantage

from trinity_core.buffer import BufferWriter, make_buffer
from trinity_core.experience import Experience


class RecordingWriter(BufferWriter):
    """A writer that records each ``write`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Experience]] = []

    async def write(self, data: list[Experience]) -> None:
        self.calls.append(list(data))


def test_default_args_match_the_seed() -> None:
    assert GRPOAddStrategy.default_args() == {"epsilon": 1e-6}
    with pytest.raises(pydantic.ValidationError):
        GRPOAddStrategy(RecordingWriter(), std_threshold=0.1)


def test_seed_example_three_tasks_of_five_runs() -> None:
    # The earlier releases' test: 3 tasks x 5 runs with reward = run index -> every group has mean 2,
    # std_u([0..4]).
    writer = RecordingWriter()
    strategy = GRPOAddStrategy.from_args({"epsilon": 1e-6}, writer=writer)
    exps = interleave(make_group_exps([[0, 1, 2, 3, 4]] * 3), [i * 5 % 15 + i // 3 for i in range(15)])
    count, metrics = asyncio.run(strategy.add(exps, step=1))
    assert count == 15
    assert len(writer.calls) == 1  # one write, grouped, groups in first-appearance order
    written = writer.calls[0]
    assert [e.eid.task for e in written] == sorted((e.eid.task for e in exps), key=[0, 1, 2].index)
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx(2.0)
    std = math.sqrt(2.5)
    assert float(metrics["group_advantages/reward_std/mean"]) == pytest.approx(std)
    expected = torch.tensor([(e.reward - 2.0) / (std + 1e-6) for e in written], dtype=torch.float64)
    torch.testing.assert_close(scores(written), expected, rtol=1e-6, atol=1e-7)


def test_singletons_get_zero_and_agree_with_the_advantage_fn() -> None:
    writer = RecordingWriter()
    strategy = GRPOAddStrategy(writer, epsilon=0.01)
    groups = [[1.0], [0.0, 3.0, 1.0], [2.0, 2.0]]
    count, _ = asyncio.run(strategy.add(make_group_exps(groups), step=0))
    expected, _ = GRPOGroupedAdvantage(epsilon=0.01)(make_group_exps(groups))
    assert count == 6
    torch.testing.assert_close(scores(writer.calls[0]), scores(expected))
    assert float(scores(writer.calls[0])[0]) == 0.0


def test_per_group_and_vectorized_paths_agree() -> None:
    strategy = GRPOAddStrategy(RecordingWriter())
    groups = [[0.5, 1.0, 0.0], [3.0], [1.0, 1.0]]
    out_a, metrics_a = strategy.process_per_group(make_group_exps(groups))
    out_b, metrics_b = strategy.process_vectorized(make_group_exps(groups))
    torch.testing.assert_close(scores(out_a), scores(out_b))
    assert metrics_a.keys() == metrics_b.keys()


def test_memory_buffer_round_trip_and_empty_step() -> None:
    writer, reader = make_buffer("memory")
    strategy = GRPOAddStrategy(writer)

    async def scenario() -> tuple[tuple[int, dict], tuple[int, dict], list[Experience]]:
        empty = await strategy.add([], step=0)
        full = await strategy.add(make_group_exps([[0.0, 1.0]]), step=1)
        return empty, full, await reader.read(batch_size=2)

    empty, full, read = asyncio.run(scenario())
    assert empty == (0, {})
    assert full[0] == 2
    assert [e.reward for e in read] == [0.0, 1.0]
    assert float(read[1].advantages[0]) == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6))
