"""The ``step_wise_grpo`` add strategy (API of earlier Trinity-RFT releases): one buffer write per explore
step, the per-run helpers of those releases."""

from __future__ import annotations

import asyncio

import pydantic
import pytest
import torch
from multistep_support import make_runs, scores
from trinity_plugin_multistep import StepWiseGRPOAdvantageFn, StepWiseGRPOStrategy

from trinity_core.buffer import BufferWriter, make_buffer
from trinity_core.experience import Experience


class RecordingWriter(BufferWriter):
    """A writer that records each ``write`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Experience]] = []

    async def write(self, data: list[Experience]) -> None:
        self.calls.append(list(data))


def test_default_args_are_the_seed_args() -> None:
    assert StepWiseGRPOStrategy.default_args() == {"epsilon": 1e-6, "enable_step_norm": False}
    with pytest.raises(pydantic.ValidationError):
        StepWiseGRPOStrategy(RecordingWriter(), std_threshold=0.1)


def test_seed_example_two_tasks_three_runs_four_steps() -> None:
    # The earlier releases' test: 2 tasks x 3 runs x 4 steps, reward = run index -> count 24,
    # reward_mean/mean 1.0; here written with one call (those releases made one call per run).
    writer = RecordingWriter()
    strategy = StepWiseGRPOStrategy.from_args({"enable_step_norm": True}, writer=writer)
    exps = make_runs([[(k, 4) for k in range(3)]] * 2)
    count, metrics = asyncio.run(strategy.add(exps, step=0))
    assert count == 24
    assert len(writer.calls) == 1
    assert float(metrics["group_advantages/reward_mean/mean"]) == 1.0
    assert float(metrics["group_advantages/reward_std/mean"]) == 1.0
    expected = torch.tensor([(e.eid.run - 1) / (1 + 1e-6) / 4 for e in writer.calls[0]], dtype=torch.float64)
    torch.testing.assert_close(scores(writer.calls[0]), expected, rtol=1e-6, atol=1e-7)


def test_add_agrees_with_the_advantage_function_and_handles_empty_steps() -> None:
    writer, reader = make_buffer("memory")
    strategy = StepWiseGRPOStrategy(writer, epsilon=0.01)
    tasks = [[(0, 2), (3, 1), (1, 3)], [(2, 1)]]

    async def scenario() -> tuple:
        empty = await strategy.add([], step=0)
        full = await strategy.add(make_runs(tasks), step=1)
        return empty, full, await reader.read(batch_size=7)

    empty, full, written = asyncio.run(scenario())
    expected, _ = StepWiseGRPOAdvantageFn(epsilon=0.01)(make_runs(tasks))
    assert empty == (0, {})
    assert full[0] == 7
    torch.testing.assert_close(scores(written), scores(expected))


def test_seed_helpers_score_and_broadcast() -> None:
    strategy = StepWiseGRPOStrategy(RecordingWriter(), enable_step_norm=True)
    exps = make_runs([[(0, 2), (2, 1)]])
    runs = {"a": exps[:2], "b": exps[2:]}
    run_scores, metrics = strategy.calculate_group_advantage({"a": exps[1], "b": exps[2]})
    a = 1 / (2**0.5 + 1e-6)
    assert run_scores == pytest.approx({"a": -a, "b": a})
    assert metrics == pytest.approx({"reward_mean": 1.0, "reward_std": 2**0.5})
    strategy.broadcast_advantages(runs, run_scores)
    assert scores(exps).tolist() == pytest.approx([-a / 2, -a / 2, a])
    assert torch.equal(exps[0].returns, exps[0].advantages)
    single, _ = strategy.calculate_group_advantage({"a": exps[1]})
    assert single == {"a": 0.0}
