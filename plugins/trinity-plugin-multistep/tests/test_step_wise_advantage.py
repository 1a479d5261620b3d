"""The ``step_wise_grpo`` advantage: hand-derived values, the last step by ``eid.step``, step norm,
threshold and batch std, both paths against a Python transcription, no host synchronisation."""

from __future__ import annotations

import math
import random

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from multistep_support import make_runs, python_step_wise, scores
from trinity_plugin_multistep import StepWiseGRPOAdvantageFn

from trinity_core.batch import ExperienceBatch
from trinity_core.components.advantage import GroupComputation
from trinity_core.testing import count_host_syncs

EPS = 1e-6
BOTH_PATHS = pytest.mark.parametrize("path", ["process_vectorized", "process_per_group"])


def run(path: str, fn: StepWiseGRPOAdvantageFn, exps: list) -> tuple[list, dict]:
    out, metrics = getattr(fn, path)(exps)
    return out, metrics


def by_uid(exps: list) -> dict[str, float]:
    return {e.eid.uid: float(e.advantages[0]) for e in exps}


def test_defaults_and_validation() -> None:
    assert StepWiseGRPOAdvantageFn.default_args() == {
        "epsilon": 1e-6,
        "enable_step_norm": False,
        "std_cal_level": "group",
        "std_threshold": None,
    }
    assert StepWiseGRPOAdvantageFn.compute_in_trainer() is False
    for bad in ({"std_cal_level": "token"}, {"std_threshold": -1.0}, {"ignored_kwarg": 1}):
        with pytest.raises(pydantic.ValidationError):
            StepWiseGRPOAdvantageFn(**bad)


@BOTH_PATHS
def test_golden_broadcast_and_step_norm(path: str) -> None:
    # Task 0: runs with last-step rewards 0, 1, 2 and 3, 1, 2 steps: mean 1, std 1 -> scores -1, 0, 1.
    # Task 1: two runs with reward 5: zero variance -> 0. Task 2: one run -> 0.
    tasks = [[(0, 3), (1, 1), (2, 2)], [(5, 2), (5, 1)], [(7, 2)]]
    out, metrics = run(path, StepWiseGRPOAdvantageFn(), make_runs(tasks))
    s = 1 / (1 + EPS)
    assert scores(out).tolist() == pytest.approx([-s] * 3 + [0.0] + [s] * 2 + [0.0] * 5, abs=1e-7)
    out, _ = run(path, StepWiseGRPOAdvantageFn(enable_step_norm=True), make_runs(tasks))
    assert scores(out).tolist() == pytest.approx([-s / 3] * 3 + [0.0] + [s / 2] * 2 + [0.0] * 5, abs=1e-7)
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx(3.0)  # (1 + 5) / 2
    assert float(metrics["group_advantages/reward_std/max"]) == pytest.approx(1.0)
    assert int(metrics["group_advantages/single_run_task_count"]) == 1
    assert int(metrics["experience_count"]) == 11
    assert int(metrics["filtered_count"]) == 0
    assert float(metrics["skipped_group_ratio"]) == 0.0


@BOTH_PATHS
def test_last_step_is_the_largest_eid_step_not_the_last_inserted(path: str) -> None:
    # Run 0 has steps 0 (reward 9) and 1 (reward 0), inserted as step 1 then step 0: its last step is
    # step 1, reward 0. Run 1: reward 2. Scores: -1, +1 (std sqrt(2), mean 1) -> ∓ 1/sqrt(2).
    exps = make_runs([[(0, 2), (2, 1)]])
    exps[0].reward = 9.0
    exps = [exps[1], exps[0], exps[2]]
    out, _ = run(path, StepWiseGRPOAdvantageFn(), exps)
    a = 1 / (math.sqrt(2) + EPS)
    assert scores(out).tolist() == pytest.approx([-a, -a, a], abs=1e-7)


@BOTH_PATHS
def test_earlier_steps_may_lack_rewards_but_the_last_may_not(path: str) -> None:
    exps = make_runs([[(1, 3), (0, 2)]], earlier_rewards=False)
    out, _ = run(path, StepWiseGRPOAdvantageFn(), exps)
    assert len(out) == 5
    exps[2].reward = None  # the last step of run 0
    with pytest.raises(ValueError, match="last step of its run"):
        run(path, StepWiseGRPOAdvantageFn(), exps)


@BOTH_PATHS
def test_std_threshold_drops_flat_and_single_run_tasks(path: str) -> None:
    tasks = [[(1, 2), (1, 2)], [(0, 1), (1, 3)], [(4, 2)]]
    out, metrics = run(path, StepWiseGRPOAdvantageFn(std_threshold=0.0), make_runs(tasks))
    assert {e.eid.task for e in out} == {1}
    assert int(metrics["filtered_count"]) == 6
    assert int(metrics["experience_count"]) == 4
    assert float(metrics["skipped_group_ratio"]) == pytest.approx(2 / 3)


@BOTH_PATHS
def test_batch_std_uses_runs_of_multi_run_tasks(path: str) -> None:
    # Last-step rewards 0, 2 (task 0) and 1, 5 (task 1); task 2 (one run) is excluded.
    # Batch values 0, 2, 1, 5: mean 2, squared deviations 4 + 0 + 1 + 9 = 14, unbiased var 14 / 3.
    tasks = [[(0, 2), (2, 1)], [(1, 1), (5, 1)], [(9, 1)]]
    out, metrics = run(path, StepWiseGRPOAdvantageFn(std_cal_level="batch"), make_runs(tasks))
    sigma = math.sqrt(14 / 3) + EPS
    assert scores(out).tolist() == pytest.approx([-1 / sigma] * 2 + [1 / sigma, -2 / sigma, 2 / sigma, 0.0])
    assert float(metrics["group_advantages/batch_reward_std"]) == pytest.approx(math.sqrt(14 / 3))


RUN = st.tuples(st.integers(-4, 4).map(lambda k: k / 2), st.integers(1, 4))


@settings(max_examples=40, deadline=None)
@given(
    tasks=st.lists(st.lists(RUN, min_size=1, max_size=4), min_size=1, max_size=4),
    seed=st.integers(0, 1000),
    step_norm=st.booleans(),
    level=st.sampled_from(["group", "batch"]),
    threshold=st.sampled_from([None, 0.0, 0.6]),
)
def test_both_paths_match_the_python_transcription(
    tasks: list, seed: int, step_norm: bool, level: str, threshold: float | None
) -> None:
    args = {"enable_step_norm": step_norm, "std_cal_level": level, "std_threshold": threshold}
    exps = make_runs(tasks, earlier_rewards=False)
    if seed % 2:  # shuffled (dict grouping) or in rollout order (contiguous runs: the tensor grouping)
        random.Random(seed).shuffle(exps)
    expected = python_step_wise(exps, **args)
    fn = StepWiseGRPOAdvantageFn(**args)
    out_v, metrics_v = fn.process_vectorized(list(exps))
    got_v = by_uid(out_v)
    out_p, metrics_p = fn.process_per_group(list(exps))
    assert [e.eid.uid for e in out_v] == [e.eid.uid for e in out_p]
    assert by_uid(out_p) == got_v
    want = {u: a for u, a in expected.items() if a is not None}
    assert got_v.keys() == want.keys()
    for uid, value in want.items():
        assert got_v[uid] == pytest.approx(value, rel=1e-6, abs=1e-6)
    assert metrics_v.keys() == metrics_p.keys()
    for k in metrics_v:
        torch.testing.assert_close(
            torch.as_tensor(metrics_v[k]).double(), torch.as_tensor(metrics_p[k]).double(), rtol=1e-12, atol=0
        )


@settings(max_examples=40, deadline=None)
@given(
    tasks=st.lists(st.lists(RUN, min_size=1, max_size=4), min_size=1, max_size=4),
    seed=st.integers(0, 1000),
    earlier_rewards=st.booleans(),
    step_norm=st.booleans(),
    threshold=st.sampled_from([None, 0.6]),
)
def test_list_path_is_process_batch_on_the_batch(
    tasks: list, seed: int, earlier_rewards: bool, step_norm: bool, threshold: float | None
) -> None:
    # The list path builds no batch; it must give bitwise what the batch path gives (columnar_equivalent).
    exps = make_runs(tasks, earlier_rewards=earlier_rewards)
    if seed % 2:
        random.Random(seed).shuffle(exps)
    fn = StepWiseGRPOAdvantageFn(enable_step_norm=step_norm, std_threshold=threshold)
    assert fn.columnar_equivalent()
    out_list, metrics_list = fn.process_vectorized(list(exps))
    got = [(e.eid.uid, e.advantages.clone(), e.returns.clone()) for e in out_list]
    out_batch, metrics_batch = GroupComputation.process_vectorized(fn, list(exps))
    assert [uid for uid, _, _ in got] == [e.eid.uid for e in out_batch]
    for (_, advantages, returns), exp in zip(got, out_batch, strict=True):
        assert torch.equal(advantages.view(torch.int32), exp.advantages.view(torch.int32))
        assert torch.equal(returns.view(torch.int32), exp.returns.view(torch.int32))
    assert metrics_list.keys() == metrics_batch.keys()
    for key in metrics_list:
        torch.testing.assert_close(
            torch.as_tensor(metrics_list[key]), torch.as_tensor(metrics_batch[key]), rtol=0, atol=0
        )


def test_a_subclass_with_its_own_process_batch_takes_the_batch_path() -> None:
    class Halved(StepWiseGRPOAdvantageFn):
        def process_batch(self, batch: ExperienceBatch) -> tuple[torch.Tensor, dict, torch.Tensor]:
            advantages, metrics, keep = super().process_batch(batch)
            return advantages / 2, metrics, keep

    exps = make_runs([[(1.0, 2), (0.0, 2)]])
    assert not Halved().columnar_equivalent()
    halved = scores(Halved().process(list(exps))[0])
    assert torch.equal(halved * 2, scores(StepWiseGRPOAdvantageFn().process(list(exps))[0]))


def test_numeric_core_has_no_host_sync_and_runs_on_meta() -> None:
    exps = make_runs([[(0, 3), (1, 1), (2, 2)], [(5, 2), (5, 1)], [(7, 2)]], earlier_rewards=False)
    random.Random(0).shuffle(exps)
    batch = ExperienceBatch.from_experiences(exps)
    steps = torch.tensor([e.eid.step for e in exps])
    fn = StepWiseGRPOAdvantageFn(enable_step_norm=True, std_cal_level="batch", std_threshold=0.1)
    args = (
        batch.group_index["task"],
        batch.num_groups["task"],
        batch.group_index["run"],
        batch.num_groups["run"],
    )
    with count_host_syncs() as log:
        advantages, _, keep = fn.scores_from_tensors(batch.rewards, *args, steps)
    assert len(log) == 0, log.describe()
    assert advantages.shape == keep.shape == (len(exps),)
    meta = torch.device("meta")
    n = 10
    adv, metrics, keep = fn.scores_from_tensors(
        torch.empty(n, dtype=torch.float64, device=meta),
        torch.empty(n, dtype=torch.int64, device=meta),
        3,
        torch.empty(n, dtype=torch.int64, device=meta),
        6,
        torch.empty(n, dtype=torch.int64, device=meta),
    )
    assert adv.device.type == "meta"
    assert keep.dtype == torch.bool
    assert all(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in metrics.values())
