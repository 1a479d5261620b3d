"""The ``gigpo`` advantage: hand-derived values, reward sources, per-task anchors, step order, both paths,
no host synchronisation."""

from __future__ import annotations

import math
import random

import pydantic
import pytest
import torch
from gigpo_support import by_uid, make_episodes, uid
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_gigpo import GiGPOAdvantageFn

from trinity_core.batch import ExperienceBatch
from trinity_core.testing import count_host_syncs

BOTH_PATHS = pytest.mark.parametrize("path", ["process_vectorized", "process_per_group"])

# One task, two runs. Run 0: r = (1, 0), states s0, s1. Run 1: r = (0, 0, 2), states s0, s1, s2.
EXAMPLE = [[[(1.0, "s0"), (0.0, "s1")], [(0.0, "s0"), (0.0, "s1"), (2.0, "s2")]]]


def run(path: str, fn: GiGPOAdvantageFn, exps: list) -> tuple[list, dict]:
    out, metrics = getattr(fn, path)(exps)
    return out, metrics


def test_defaults_and_validation() -> None:
    assert GiGPOAdvantageFn.default_args() == {
        "omega": 1.0,
        "gamma": 1.0,
        "fnorm": "none",
        "epsilon": 1e-6,
        "step_reward_key": "step_reward",
        "env_state_hash_key": "env_state_hash",
    }
    assert GiGPOAdvantageFn.compute_in_trainer() is False
    for bad in ({"fnorm": "mad"}, {"gamma": 1.5}, {"omega": -1.0}, {"ignored": 1}):
        with pytest.raises(pydantic.ValidationError):
            GiGPOAdvantageFn(**bad)


@BOTH_PATHS
def test_golden_fnorm_none(path: str) -> None:
    # gamma 0.5: R = (1, 0) and (0.5, 1, 2); episode returns 1, 2 -> A_E = -0.5, +0.5.
    # Anchors: s0 {1, 0.5} -> ±0.25; s1 {0, 1} -> ∓0.5; s2 alone -> 0.
    fn = GiGPOAdvantageFn(gamma=0.5, epsilon=0.0)
    out, metrics = run(path, fn, make_episodes(EXAMPLE))
    got = by_uid(out)
    expected = {
        uid(0, 0, 0): -0.25,
        uid(0, 0, 1): -1.0,
        uid(0, 1, 0): 0.25,
        uid(0, 1, 1): 1.0,
        uid(0, 1, 2): 0.5,
    }
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)  # stored as float32
    assert float(metrics["gigpo/episode_reward_mean/mean"]) == 1.5
    assert float(metrics["gigpo/episode_reward_std/mean"]) == pytest.approx(math.sqrt(0.5))
    assert int(metrics["gigpo/anchor_groups_total"]) == 3
    assert int(metrics["gigpo/anchor_groups_size_gt1"]) == 2
    assert float(metrics["gigpo/anchor_group_hit_ratio"]) == pytest.approx(2 / 3)
    assert float(metrics["gigpo/mean_abs_A_E"]) == pytest.approx(0.5)
    assert float(metrics["gigpo/mean_abs_A_S"]) == pytest.approx(0.3)
    assert int(metrics["experience_count"]) == 5


@BOTH_PATHS
def test_golden_fnorm_std_and_omega(path: str) -> None:
    # Every group above has two members whose deviations are ±d with unbiased std d·sqrt(2): ±1/sqrt(2).
    fn = GiGPOAdvantageFn(gamma=0.5, epsilon=0.0, fnorm="std", omega=2.0)
    got = by_uid(run(path, fn, make_episodes(EXAMPLE))[0])
    h = 1 / math.sqrt(2)
    expected = {
        uid(0, 0, 0): -h + 2 * h,
        uid(0, 0, 1): -h - 2 * h,
        uid(0, 1, 0): h - 2 * h,
        uid(0, 1, 1): h + 2 * h,
        uid(0, 1, 2): h,
    }
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)  # stored as float32


@BOTH_PATHS
def test_sparse_fallback_uses_the_reward_of_the_last_step(path: str) -> None:
    # No step_reward key: r = (0, 0, R) with R = exp.reward of the last step (None counts as 0).
    tasks = [[[(None, "a"), (None, "b")], [(None, "a"), (None, "c")], [(None, "a")]]]
    exps = make_episodes(tasks, final_rewards=[[3.0, 1.0, None]])
    fn = GiGPOAdvantageFn(epsilon=0.0)
    got = by_uid(run(path, fn, exps)[0])
    # Episode returns 3, 1, 0: mean 4/3. Anchor a: R_0 = 3, 1, 0 (gamma 1) -> deviations 5/3, -1/3, -4/3.
    assert got[uid(0, 0, 0)] == pytest.approx(5 / 3 + 5 / 3)
    assert got[uid(0, 0, 1)] == pytest.approx(5 / 3)
    assert got[uid(0, 1, 0)] == pytest.approx(-1 / 3 - 1 / 3)
    assert got[uid(0, 2, 0)] == pytest.approx(-4 / 3 - 4 / 3)


@BOTH_PATHS
def test_steps_are_ordered_by_eid_step_not_batch_order(path: str) -> None:
    fn = GiGPOAdvantageFn(gamma=0.5, epsilon=0.0)
    in_order = by_uid(run(path, fn, make_episodes(EXAMPLE))[0])
    shuffled = make_episodes(EXAMPLE)
    random.Random(1).shuffle(shuffled)
    assert by_uid(run(path, fn, shuffled)[0]) == pytest.approx(in_order, abs=1e-12)


@BOTH_PATHS
def test_anchor_groups_are_scoped_per_task(path: str) -> None:
    # The same state hash "s0" in two tasks: each task alone gives the same advantages as both together.
    other = [[[(5.0, "s0")], [(0.0, "s0")]]]
    fn = GiGPOAdvantageFn(gamma=0.5)
    together = by_uid(run(path, fn, make_episodes(EXAMPLE + other))[0])
    alone = by_uid(run(path, fn, make_episodes(EXAMPLE))[0])
    assert {k: together[k] for k in alone} == pytest.approx(alone, abs=1e-12)


@BOTH_PATHS
def test_single_run_tasks_get_zero_episode_advantage(path: str) -> None:
    out, metrics = run(path, GiGPOAdvantageFn(), make_episodes([[[(1.0, None), (2.0, None)]]]))
    assert by_uid(out) == {uid(0, 0, 0): 0.0, uid(0, 0, 1): 0.0}
    assert int(metrics["gigpo/single_run_task_count"]) == 1
    assert float(metrics["gigpo/anchor_group_hit_ratio"]) == 0.0


@BOTH_PATHS
def test_non_finite_step_rewards_are_rejected(path: str) -> None:
    with pytest.raises(ValueError, match="finite number"):
        run(path, GiGPOAdvantageFn(), make_episodes([[[(math.nan, None)], [(1.0, None)]]]))


STEP = st.tuples(
    st.one_of(st.none(), st.integers(-3, 3).map(float)), st.one_of(st.none(), st.sampled_from("abc"))
)


@settings(max_examples=25, deadline=None)
@given(
    tasks=st.lists(
        st.lists(st.lists(STEP, min_size=1, max_size=4), min_size=1, max_size=4), min_size=1, max_size=3
    ),
    seed=st.integers(0, 100),
    gamma=st.sampled_from([1.0, 0.9, 0.0]),
    fnorm=st.sampled_from(["std", "none"]),
    omega=st.sampled_from([1.0, 0.5]),
)
def test_vectorized_and_per_group_paths_agree(
    tasks: list, seed: int, gamma: float, fnorm: str, omega: float
) -> None:
    exps = make_episodes(tasks, final_rewards=[[float(k) for k in range(len(runs))] for runs in tasks])
    random.Random(seed).shuffle(exps)
    fn = GiGPOAdvantageFn(gamma=gamma, fnorm=fnorm, omega=omega)
    out_v, metrics_v = fn.process_vectorized(list(exps))
    got_v = by_uid(out_v)
    out_p, metrics_p = fn.process_per_group(list(exps))
    assert [e.eid.uid for e in out_v] == [e.eid.uid for e in out_p]
    assert by_uid(out_p) == pytest.approx(got_v, rel=1e-6, abs=1e-6)
    assert metrics_v.keys() == metrics_p.keys()
    for k in metrics_v:
        torch.testing.assert_close(
            torch.as_tensor(metrics_v[k]).double(),
            torch.as_tensor(metrics_p[k]).double(),
            rtol=1e-9,
            atol=1e-12,
        )


def test_numeric_core_has_no_host_sync_and_runs_on_meta() -> None:
    exps = make_episodes([*EXAMPLE, [[(5.0, "s0")], [(0.0, "s0")]]])
    batch = ExperienceBatch.from_experiences(exps)
    fn = GiGPOAdvantageFn(gamma=0.9, fnorm="std")
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 5.0, 0.0], dtype=torch.float64)
    steps = torch.tensor([e.eid.step for e in exps])
    anchors = torch.tensor([0, 1, 0, 1, 2, 3, 3])
    args = (
        batch.group_index["task"],
        batch.num_groups["task"],
        batch.group_index["run"],
        batch.num_groups["run"],
    )
    with count_host_syncs() as log:
        advantages, _ = fn.scores_from_tensors(rewards, *args, steps, 3, anchors, 4)
    assert len(log) == 0, log.describe()
    torch.testing.assert_close(advantages, fn.process_batch(batch)[0])
    meta = torch.device("meta")
    n = 8
    adv, metrics = fn.scores_from_tensors(
        torch.empty(n, dtype=torch.float64, device=meta),
        torch.empty(n, dtype=torch.int64, device=meta),
        2,
        torch.empty(n, dtype=torch.int64, device=meta),
        4,
        torch.empty(n, dtype=torch.int64, device=meta),
        3,
        torch.empty(n, dtype=torch.int64, device=meta),
        5,
    )
    assert adv.device.type == "meta"
    assert all(v.device.type == "meta" for k, v in metrics.items() if k != "experience_count")
