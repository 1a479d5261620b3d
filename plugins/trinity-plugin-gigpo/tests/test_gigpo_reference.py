"""Comparison with trinity-rft 0.6.0 ``GiGPOAdvantageFn``: agreement where it is right (state hashes unique
to a task, every task with two or more runs), and the documented differences
(docs/reference-differences.md: singleton-groups, gigpo-anchor-scope)."""

from __future__ import annotations

import math

import pytest
from gigpo_support import by_uid, make_episodes, uid
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_gigpo import GiGPOAdvantageFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_cls() -> type:
    return import_reference("trinity.algorithm.advantage_fn.gigpo_advantage").GiGPOAdvantageFn


STEP = st.tuples(
    st.one_of(st.none(), st.integers(-3, 3).map(float)), st.one_of(st.none(), st.sampled_from("abc"))
)
RUN = st.lists(STEP, min_size=1, max_size=4)


def task_scoped(tasks: list) -> list:
    """Prefix every state hash with its task, so the reference's batch-wide buckets are per task too."""
    return [
        [[(r, None if s is None else f"{t}:{s}") for r, s in run] for run in runs]
        for t, runs in enumerate(tasks)
    ]


@settings(max_examples=30, deadline=None)
@given(
    tasks=st.lists(st.lists(RUN, min_size=2, max_size=4), min_size=1, max_size=3),
    gamma=st.sampled_from([1.0, 0.9, 0.5]),
    fnorm=st.sampled_from(["std", "none"]),
    omega=st.sampled_from([1.0, 0.3]),
)
def test_agrees_when_hashes_are_task_scoped_and_tasks_have_several_runs(
    tasks: list, gamma: float, fnorm: str, omega: float
) -> None:
    scoped = task_scoped(tasks)
    finals = [[float(k % 2) for k in range(len(runs))] for runs in tasks]
    args = {"gamma": gamma, "fnorm": fnorm, "omega": omega}
    ours, our_metrics = GiGPOAdvantageFn(**args)(make_episodes(scoped, finals))
    theirs, their_metrics = reference_cls()(**args)(make_episodes(scoped, finals))
    a, b = by_uid(ours), by_uid(theirs)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-4)
    for key in ("anchor_groups_total", "anchor_groups_size_gt1", "anchor_group_hit_ratio", "mean_abs_A_S"):
        assert float(our_metrics[f"gigpo/{key}"]) == pytest.approx(
            their_metrics[f"gigpo/{key}"], rel=1e-4, abs=1e-5
        )
    assert float(our_metrics["gigpo/episode_reward_mean/mean"]) == pytest.approx(
        their_metrics["gigpo/episode_reward_mean/mean"], rel=1e-5, abs=1e-6
    )


def test_the_reference_merges_equal_hashes_of_different_tasks() -> None:
    # Task 0 and task 1 both report state "s": the reference puts their first steps in one anchor group.
    tasks = [[[(1.0, "s")], [(0.0, "x")]], [[(9.0, "s")], [(0.0, "y")]]]
    ours = by_uid(GiGPOAdvantageFn(epsilon=0.0)(make_episodes(tasks))[0])
    theirs = by_uid(reference_cls()(epsilon=0.0)(make_episodes(tasks))[0])
    # Ours: "s" is alone in each task -> A_S = 0; A_E = ±0.5 (task 0), ±4.5 (task 1).
    assert ours[uid(0, 0, 0)] == pytest.approx(0.5)
    assert ours[uid(1, 0, 0)] == pytest.approx(4.5)
    # Reference: bucket "s" = {1, 9} -> A_S = ∓4, so task 0's first step gets 0.5 - 4.
    assert theirs[uid(0, 0, 0)] == pytest.approx(0.5 - 4.0, rel=1e-5)
    assert theirs[uid(1, 0, 0)] == pytest.approx(4.5 + 4.0, rel=1e-5)


def test_episode_std_metric_is_the_std_not_the_normaliser() -> None:
    tasks = [[[(0.0, None)], [(2.0, None)]]]
    _, ours = GiGPOAdvantageFn()(make_episodes(tasks))
    _, theirs = reference_cls()()(make_episodes(tasks))
    assert theirs["gigpo/episode_reward_std/mean"] == 1.0  # fnorm="none": the normaliser
    assert float(ours["gigpo/episode_reward_std/mean"]) == pytest.approx(math.sqrt(2.0))


def test_single_run_task_gets_zero_where_the_reference_uses_the_raw_return() -> None:
    tasks = [[[(3.0, None)]]]
    ours = by_uid(GiGPOAdvantageFn()(make_episodes(tasks))[0])
    theirs = by_uid(reference_cls()()(make_episodes(tasks))[0])
    assert ours[uid(0, 0, 0)] == 0.0
    assert theirs[uid(0, 0, 0)] == pytest.approx(3.0 / (1 + 1e-6))
