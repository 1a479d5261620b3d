"""reward_variance and duplicate_informative: selection by the formula of earlier Trinity-RFT releases,
exact refill, fresh EIDs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polaris_support import RecordingWriter, make_exps, numpy_informative, run_add
from trinity_plugin_polaris import DuplicateInformativeAddStrategy, RewardVarianceAddStrategy
from trinity_plugin_polaris.duplicate import copy_plan, extremes_first

groups_strategy = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(groups=groups_strategy, threshold=st.sampled_from([0.0, 0.2, 1.0]))
def test_reward_variance_selects_like_the_seed(groups: list[list[int]], threshold: float) -> None:
    writer = RecordingWriter()
    count, metrics = run_add(
        RewardVarianceAddStrategy(writer, variance_threshold=threshold), make_exps(groups)
    )
    chosen = numpy_informative(groups, threshold)
    expected = [(g, run) for g, row in enumerate(groups) if chosen[g] for run in range(len(row))]
    written = writer.calls[0] if writer.calls else []
    assert len(writer.calls) == (1 if expected else 0)  # one write call
    assert [(e.eid.task, e.eid.run) for e in written] == expected  # grouped, groups in order
    assert count == len(expected)
    assert int(metrics["filtered_count"]) == sum(map(len, groups)) - count
    assert int(metrics["informative_group_count"]) == sum(chosen)


def test_equal_rewards_are_zero_variance_unlike_numpy() -> None:
    # np.var([0.1] * 3) == 1.9e-34 > 0, so earlier releases kept this group; the float64 pivoted
    # variance is 0.
    assert numpy_informative([[0.1, 0.1, 0.1]], 0.0) == [True]
    count, _ = run_add(RewardVarianceAddStrategy(RecordingWriter()), make_exps([[0.1, 0.1, 0.1]]))
    assert count == 0


@pytest.mark.parametrize("cls", [RewardVarianceAddStrategy, DuplicateInformativeAddStrategy])
def test_missing_reward_is_rejected(cls: type) -> None:
    exps = make_exps([[0.0, 1.0]])
    exps[1].reward = None
    with pytest.raises(ValueError, match=r"has reward None.*finite reward"):
        run_add(cls(RecordingWriter()), exps)


def test_copy_plan_whole_groups_then_one_partial() -> None:
    assert copy_plan([2, 2], 4) == [(0, 2), (1, 2)]
    assert copy_plan([2, 2], 6) == [(0, 2), (1, 2), (0, 2)]
    assert copy_plan([3, 2], 4) == [(0, 3), (0, 1)]  # 2 does not fit after 3; 1 member of group 0
    assert copy_plan([4], 3) == [(0, 3)]
    assert copy_plan([4], 0) == []


def test_extremes_first() -> None:
    assert extremes_first([0.0, 3.0, 1.0, 3.0]) == [1, 0, 3, 2]


@settings(max_examples=40, deadline=None)
@given(groups=groups_strategy, threshold=st.sampled_from([0.0, 0.5]))
def test_duplicate_informative_restores_the_count_exactly(groups: list[list[int]], threshold: float) -> None:
    writer = RecordingWriter()
    exps = make_exps(groups)
    count, metrics = run_add(DuplicateInformativeAddStrategy(writer, variance_threshold=threshold), exps)
    chosen = numpy_informative(groups, threshold)
    if not any(chosen):
        assert count == 0
        assert writer.calls == []
        return
    (written,) = writer.calls
    assert count == len(written) == len(exps)
    kept = sum(len(g) for g, c in zip(groups, chosen, strict=True) if c)
    assert int(metrics["duplicated_count"]) == len(exps) - kept
    assert len({e.eid.uid for e in written}) == len(written)  # fresh, distinct EIDs
    source_tids = {e.eid.tid for e in exps}
    copies = written[kept:]
    assert all(e.eid.tid not in source_tids for e in copies)  # copies never join a source group
    for copy in copies:  # a copy carries its source's data, not shared tensors
        g, run = copy.info["source"]
        assert copy.reward == groups[g][run]
        assert copy.tokens is not exps[0].tokens


def test_whole_copies_are_new_groups_with_the_source_rewards() -> None:
    writer = RecordingWriter()
    exps = make_exps([[0.0, 1.0], [2.0, 2.0], [1.0, 0.0, 1.0]], tasks=["a", "b", "c"])
    count, _ = run_add(DuplicateInformativeAddStrategy(writer), exps)
    written = writer.calls[0]
    assert count == 7
    tasks = [e.eid.task for e in written]
    assert tasks == ["a", "a", "c", "c", "c", "a-dup1", "a-dup1"]  # group b dropped, a copied once
    assert [e.reward for e in written[5:]] == [0.0, 1.0]


def test_partial_copy_keeps_the_spread_and_ids_do_not_collide() -> None:
    # 4 kept of 4 + 3 (second group flat): 3 missing, smaller than the group -> partial copy of
    # 3 members of group 0, extremes first: max 5, min 0, next max 4
    writer = RecordingWriter()
    exps = make_exps([[0.0, 5.0, 2.0, 4.0], [1.0, 1.0, 1.0]], tasks=[7, "7-dup1"])
    run_add(DuplicateInformativeAddStrategy(writer), exps)
    copies = writer.calls[0][4:]
    assert sorted(e.reward for e in copies) == [0.0, 4.0, 5.0]
    assert {e.eid.task for e in copies} == {"7-dup1.1"}  # "7-dup1" was taken by a real task


def test_duplication_is_deterministic() -> None:
    def uids() -> list[str]:
        writer = RecordingWriter()
        run_add(DuplicateInformativeAddStrategy(writer), make_exps([[0.0, 1.0, 1.0], [1.0, 1.0], [3.0, 0.0]]))
        return [e.eid.uid for e in writer.calls[0]]

    assert uids() == uids()


def test_empty_step() -> None:
    writer = RecordingWriter()
    assert run_add(DuplicateInformativeAddStrategy(writer), []) == (0, {})
    assert run_add(RewardVarianceAddStrategy(writer), []) == (0, {})
    assert writer.calls == []
