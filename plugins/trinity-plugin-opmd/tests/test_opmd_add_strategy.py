"""The ``opmd`` add strategy: OPMD advantages of one explore step, written with one buffer write."""

from __future__ import annotations

import asyncio
import math

import pydantic
import pytest
import torch
from opmd_support import interleave, make_group_exps, scores
from trinity_plugin_opmd import OPMDAddStrategy, OPMDGroupAdvantage

from trinity_core.buffer import BufferWriter, make_buffer
from trinity_core.experience import Experience


class RecordingWriter(BufferWriter):
    """A writer that records each ``write`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Experience]] = []

    async def write(self, data: list[Experience]) -> None:
        self.calls.append(list(data))


def test_seed_signature_and_defaults() -> None:
    assert OPMDAddStrategy.default_args() == {"opmd_baseline": "mean", "tau": 1.0}
    strategy = OPMDAddStrategy(RecordingWriter(), opmd_baseline="logavgexp", tau=0.5)
    assert (strategy.opmd_baseline, strategy.tau) == ("logavgexp", 0.5)
    with pytest.raises(pydantic.ValidationError):
        OPMDAddStrategy(RecordingWriter(), opmd_baseline="median")


@pytest.mark.parametrize("baseline", ["mean", "logavgexp"])
def test_one_grouped_write_and_the_baseline_metric(baseline: str) -> None:
    # 3 tasks x 4 runs, reward = run index, interleaved. Mean baseline 1.5; log-avg-exp log(Σe^i / 4).
    writer = RecordingWriter()
    strategy = OPMDAddStrategy.from_args({"opmd_baseline": baseline}, writer=writer)
    exps = interleave(make_group_exps([[0, 1, 2, 3]] * 3), [i * 4 % 12 + i // 3 for i in range(12)])
    count, metrics = asyncio.run(strategy.add(exps, step=3))
    assert count == 12
    assert len(writer.calls) == 1
    written = writer.calls[0]
    assert [e.eid.task for e in written] == [0] * 4 + [1] * 4 + [2] * 4
    b = 1.5 if baseline == "mean" else math.log(sum(math.exp(i) for i in range(4)) / 4)
    expected = torch.tensor([e.reward - b for e in written], dtype=torch.float64)
    torch.testing.assert_close(scores(written), expected, rtol=1e-6, atol=1e-6)
    # The earlier releases' strategy lost this metric (a tensor dropped by its pandas gathering); here it
    # is reported.
    assert float(metrics["group_advantages/group_baseline/mean"]) == pytest.approx(b)
    assert isinstance(metrics["group_advantages/group_baseline/mean"], torch.Tensor)
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx(1.5)


def test_agrees_with_the_advantage_function() -> None:
    groups = [[0.5], [0.0, 3.0, 1.0], [2.0, 2.0]]
    writer = RecordingWriter()
    count, metrics = asyncio.run(
        OPMDAddStrategy(writer, opmd_baseline="logavgexp", tau=2.0).add(make_group_exps(groups), 0)
    )
    expected, expected_metrics = OPMDGroupAdvantage(opmd_baseline="logavgexp", tau=2.0)(
        make_group_exps(groups)
    )
    assert count == 6
    torch.testing.assert_close(scores(writer.calls[0]), scores(expected))
    assert metrics.keys() == expected_metrics.keys()


def test_memory_buffer_round_trip_and_empty_step() -> None:
    writer, reader = make_buffer("memory")
    strategy = OPMDAddStrategy(writer)

    async def scenario() -> tuple[tuple[int, dict], tuple[int, dict], list[Experience]]:
        empty = await strategy.add([], step=0)
        full = await strategy.add(make_group_exps([[0.0, 1.0]]), step=1)
        return empty, full, await reader.read(batch_size=2)

    empty, full, read = asyncio.run(scenario())
    assert empty == (0, {})
    assert full[0] == 2
    assert [float(e.advantages[0]) for e in read] == [-0.5, 0.5]
