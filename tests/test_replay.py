"""The replay buffer with the core's ``fifo`` priority: which groups are drawn, reused, evicted (derived by
hand), what it keeps is exactly what it was given (the wire format), its state, and a broken priority
function named."""

from __future__ import annotations

import re

import pytest
import torch
from torch import Tensor

from trinity_core.buffer import FifoPriority, ReplayBuffer
from trinity_core.components import PriorityFn, ReplayStats
from trinity_core.experience import EID, Experience
from trinity_core.registry import PluginContractError


def group(task: int, rewards: list[float], version: int = 0) -> list[Experience]:
    return [
        Experience(
            eid=EID(batch=version, task=task, run=i),
            tokens=torch.tensor([1, 2, 3 + i]),
            prompt_length=2,
            reward=r,
            advantages=torch.tensor([r - 0.5]),
            info={"model_version": version},
        )
        for i, r in enumerate(rewards)
    ]


def tasks(drawn: list[Experience]) -> list[int]:
    return list(dict.fromkeys(int(e.eid.task) for e in drawn))


def test_fifo_draws_the_oldest_groups_and_retires_them_after_max_reuse() -> None:
    replay = ReplayBuffer(FifoPriority(), groups_per_step=2, capacity=10, max_reuse=3)
    replay.add([group(0, [1, 0]), group(1, [0, 0]), group(2, [1, 1])], [0, 0, 0], version=1)
    drawn, metrics = replay.draw(version=1)
    assert tasks(drawn) == [0, 1]  # seq 0 and 1: the oldest
    assert metrics["buffer/replay/reuse_mean"].item() == 2.0  # fresh use + this one
    drawn, _ = replay.draw(version=2)
    assert tasks(drawn) == [0, 1]  # still the oldest; now used 3 times: retired
    drawn, _ = replay.draw(version=3)
    assert tasks(drawn) == [2]
    assert len(replay) == 1


def test_max_reuse_one_stores_nothing() -> None:
    replay = ReplayBuffer(FifoPriority(), groups_per_step=4, capacity=10, max_reuse=1)
    replay.add([group(0, [1, 0])], [0], version=1)
    assert len(replay) == 0
    assert replay.draw(1)[0] == []


def test_stale_groups_are_evicted_before_drawing() -> None:
    replay = ReplayBuffer(FifoPriority(), groups_per_step=4, capacity=10, max_reuse=5, max_staleness=2)
    replay.add([group(0, [1, 0], version=0), group(1, [1, 0], version=3)], [0, 3], version=3)
    drawn, metrics = replay.draw(version=3)  # 3 - 0 > 2: group 0 is gone
    assert tasks(drawn) == [1]
    assert metrics["buffer/replay/evicted_stale"].item() == 1.0
    assert metrics["buffer/replay/age_mean"].item() == 0.0


def test_past_capacity_the_lowest_priority_goes() -> None:
    replay = ReplayBuffer(FifoPriority(), groups_per_step=0, capacity=2, max_reuse=2)
    metrics = replay.add([group(0, [1, 0]), group(1, [1, 0]), group(2, [1, 0])], [0, 0, 0], version=0)
    # fifo scores -seq: the newest group has the lowest score, so a full buffer takes no more (a queue).
    assert [e.seq for e in replay.entries] == [0, 1]
    assert metrics["buffer/replay/evicted_full"].item() == 1.0


def test_a_group_comes_back_exactly_as_it_went_in() -> None:
    replay = ReplayBuffer(FifoPriority(), groups_per_step=1, capacity=2, max_reuse=2)
    original = group(4, [0.25, 0.75], version=2)
    replay.add([original], [2], version=2)
    back, _ = replay.draw(version=3)
    for a, b in zip(original, back, strict=True):
        assert a.eid == b.eid
        assert a.reward == b.reward
        assert a.info == b.info
        assert torch.equal(a.tokens, b.tokens)
        assert torch.equal(a.advantages, b.advantages)


def test_statistics_and_state_round_trip() -> None:
    replay = ReplayBuffer(FifoPriority(), groups_per_step=1, capacity=4, max_reuse=3)
    replay.add([group(0, [1, 0, 0, 1]), group(1, [1, 1])], [5, 6], version=6)
    stats = replay.stats()
    assert stats.version.tolist() == [5, 6]
    assert stats.use_count.tolist() == [1, 1]
    assert stats.reward_mean.tolist() == [0.5, 1.0]
    assert stats.reward_var.tolist() == [0.25, 0.0]
    copy = ReplayBuffer(FifoPriority(), groups_per_step=1, capacity=4, max_reuse=3)
    copy.load_state_dict(replay.state_dict())
    assert tasks(copy.draw(7)[0]) == tasks(replay.draw(7)[0]) == [0]
    assert copy.next_seq == replay.next_seq == 2


class OneScore(PriorityFn):
    """One score for every group."""

    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        return torch.zeros(1, dtype=torch.float64)


class NotFinite(PriorityFn):
    """NaN scores."""

    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        return torch.full((len(stats),), float("nan"), dtype=torch.float64)


@pytest.mark.parametrize(
    ("cls", "words"), [(OneScore, "returned (1,) for 2 stored groups"), (NotFinite, "NaN")]
)
def test_a_broken_priority_function_is_named(cls: type, words: str) -> None:
    replay = ReplayBuffer(
        cls(), groups_per_step=1, capacity=4, max_reuse=3, label="priority function 'x' (dist 1)"
    )
    replay.add([group(0, [1, 0]), group(1, [1, 0])], [0, 0], version=0)
    with pytest.raises(PluginContractError, match=re.escape(words)) as failure:
        replay.draw(0)
    assert "priority function 'x' (dist 1)" in str(failure.value)
    assert "buffer.replay.priority_fn" in str(failure.value)
