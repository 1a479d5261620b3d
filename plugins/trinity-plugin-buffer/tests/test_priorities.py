"""Golden tests of the plugin's replay priority functions, and their order in the replay buffer."""

from __future__ import annotations

import pytest
import torch
from trinity_plugin_buffer import LinearDecayPriority, RewardVariancePriority

from trinity_core.buffer import ReplayBuffer
from trinity_core.components import ReplayStats
from trinity_core.experience import EID, Experience

STATS = ReplayStats(
    version=torch.tensor([4, 6, 6]),
    use_count=torch.tensor([1, 1, 2]),
    reward_mean=torch.tensor([0.5, 1.0, 0.25], dtype=torch.float64),
    reward_var=torch.tensor([0.25, 0.0, 0.1875], dtype=torch.float64),
    seq=torch.tensor([0, 1, 2]),
    rows=torch.tensor([4, 4, 4]),
)


def test_linear_decay_is_version_minus_decay_times_uses() -> None:
    assert LinearDecayPriority()(STATS, 7).tolist() == [4 - 2.0, 6 - 2.0, 6 - 4.0]
    assert LinearDecayPriority(decay=0.5)(STATS, 7).tolist() == [3.5, 5.5, 5.0]


def test_reward_variance_prefers_groups_with_signal() -> None:
    assert RewardVariancePriority()(STATS, 7).tolist() == [0.25, 0.0, 0.1875]
    assert RewardVariancePriority(decay=0.1)(STATS, 7).tolist() == pytest.approx([0.15, -0.1, -0.0125])


def group(task: int, rewards: list[float]) -> list[Experience]:
    return [
        Experience(eid=EID(batch=0, task=task, run=i), tokens=torch.tensor([1, 2]), prompt_length=1, reward=r)
        for i, r in enumerate(rewards)
    ]


def test_the_replay_buffer_draws_by_these_priorities() -> None:
    replay = ReplayBuffer(RewardVariancePriority(), groups_per_step=1, capacity=8, max_reuse=4)
    replay.add([group(0, [1, 1]), group(1, [0, 1]), group(2, [0, 0.5])], [0, 0, 0], version=0)
    drawn, _ = replay.draw(0)
    assert {e.eid.task for e in drawn} == {1}  # variance 0.25 beats 0.0625 and 0
    decaying = ReplayBuffer(LinearDecayPriority(), groups_per_step=2, capacity=8, max_reuse=4)
    decaying.add([group(0, [1, 0])], [3], version=3)
    decaying.add([group(1, [1, 0])], [5], version=5)
    drawn, _ = decaying.draw(5)
    assert [e.eid.task for e in drawn][::2] == [1, 0]  # 5 - 2 before 3 - 2
