"""The ``raft`` add strategy: each task group's best rewarded responses keep their loss tokens."""

from __future__ import annotations

import asyncio

import torch
from trinity_plugin_sft.raft_filter import RAFTAddStrategy, best_of_group

from trinity_core.buffer import make_buffer
from trinity_core.eid import EID
from trinity_core.experience import Experience


def test_best_of_group_keeps_ties_at_the_maximum_above_the_floor() -> None:
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    index = torch.tensor([0, 0, 0, 1, 1, 2, 2])

    keep = best_of_group(rewards, index, 3, min_reward=0.0)

    # Group 0: both 1.0 kept; group 1: best is 0.0, not above the floor; group 2: only the 2.0.
    assert keep.tolist() == [False, True, True, False, False, False, True]
    assert best_of_group(rewards, index, 3, min_reward=-1.0).tolist() == [
        False,
        True,
        True,
        True,
        True,
        False,
        True,
    ]


def test_every_experience_is_written_with_the_loss_tokens_of_the_kept_ones() -> None:
    writer, reader = make_buffer("memory")
    strategy = RAFTAddStrategy(writer)
    exps = [
        Experience(eid=EID(task=t, run=r), tokens=[1, 4, 5, 6], prompt_length=2, reward=reward)
        for t, r, reward in [(0, 0, 0.0), (0, 1, 1.0), (1, 0, 0.0), (1, 1, 0.0)]
    ]

    written, metrics = asyncio.run(strategy.add(exps, step=0))

    assert written == 4
    assert metrics["raft/kept_fraction"].item() == 0.25
    stored = asyncio.run(reader.read())
    assert [e.action_mask.tolist() for e in stored] == [
        [False, False],
        [True, True],
        [False, False],
        [False, False],
    ]
    assert all(e.advantages.tolist() == [0.0, 0.0] for e in stored)
