"""The ``rec`` advantage: hand-derived values, the balance drop, singleton/zero-variance policies, both
paths against a plain-Python transcription, no host synchronisation."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rec_support import key, make_group_exps, python_rec, scores
from trinity_plugin_rec import RECGroupedAdvantage

from trinity_core.batch import ExperienceBatch
from trinity_core.lm.sampling import Rollout
from trinity_core.testing import count_host_syncs
from trinity_core.train.explorer.experiences import rollout_batch

EPS = 1e-6
BOTH_PATHS = pytest.mark.parametrize("path", ["process_vectorized", "process_per_group"])


def run(path: str, fn: RECGroupedAdvantage, exps: list) -> tuple[list, dict]:
    out, metrics = getattr(fn, path)(exps)
    return out, metrics


def test_defaults_and_validation() -> None:
    assert RECGroupedAdvantage.default_args() == {
        "epsilon": 1e-6,
        "std_normalize": False,
        "drop": None,
        "drop_seed": 0,
        "keep_dropped": False,
    }
    assert RECGroupedAdvantage.compute_in_trainer() is False
    for bad in ({"drop": "random"}, {"epsilon": -1.0}, {"unknown": 1}):
        with pytest.raises(pydantic.ValidationError):
            RECGroupedAdvantage(**bad)


@BOTH_PATHS
def test_centred_and_std_normalized_golden_values(path: str) -> None:
    # Group 0: rewards 0, 1, 1, 2 -> mean 1, biased std sqrt((1 + 0 + 0 + 1) / 4) = sqrt(0.5).
    # Group 1: four rewards 0.7 -> exactly 0. Group 2: a singleton -> exactly 0 (reference: NameError).
    groups = [[0, 1, 1, 2], [0.7] * 4, [5.0]]
    out, metrics = run(path, RECGroupedAdvantage(), make_group_exps(groups))
    assert scores(out).tolist() == [-1.0, 0.0, 0.0, 1.0] + [0.0] * 5
    out, _ = run(path, RECGroupedAdvantage(std_normalize=True), make_group_exps(groups))
    s = math.sqrt(0.5) + EPS
    torch.testing.assert_close(
        scores(out), torch.tensor([-1 / s, 0.0, 0.0, 1 / s] + [0.0] * 5, dtype=torch.float64)
    )
    assert float(metrics["group_advantages/reward_mean/max"]) == 1.0
    assert float(metrics["group_advantages/reward_mean/min"]) == pytest.approx(0.7)
    assert float(metrics["group_advantages/reward_std/max"]) == pytest.approx(math.sqrt(0.5))
    assert int(metrics["group_advantages/singleton_count"]) == 1
    assert int(metrics["filtered_count"]) == 0
    assert float(metrics["group_advantages/drop_balance/max"]) == 0.0


@BOTH_PATHS
def test_balance_drop_removes_the_surplus_negatives(path: str) -> None:
    # Rewards 1, 0, 0, 0, 0: mean 0.2, one positive, four negatives -> three negatives dropped
    # (the three with the smallest keys). Kept: 1 and one 0 -> mean 0.5, biased std 0.5.
    exps = make_group_exps([[1, 0, 0, 0, 0]])
    negatives = sorted(exps[1:], key=lambda e: key(e.eid.uid, 0))
    survivor = negatives[3]
    out, metrics = run(path, RECGroupedAdvantage(drop="balance"), exps)
    assert [e.eid.uid for e in out] == [e.eid.uid for e in exps if e in (exps[0], survivor)]
    assert scores(out).tolist() == [0.5, -0.5]
    assert int(metrics["filtered_count"]) == 3
    assert float(metrics["group_advantages/drop_balance/mean"]) == pytest.approx(3 / 5)
    assert float(metrics["group_advantages/reward_mean/mean"]) == 0.5
    assert float(metrics["group_advantages/reward_std/mean"]) == 0.5


@BOTH_PATHS
def test_keep_dropped_reproduces_the_reference_zero_advantages(path: str) -> None:
    exps = make_group_exps([[1, 0, 0, 0, 0]])
    out, metrics = run(path, RECGroupedAdvantage(drop="balance", keep_dropped=True), exps)
    assert len(out) == 5
    values = sorted(scores(out).tolist())
    assert values == [-0.5, 0.0, 0.0, 0.0, 0.5]
    assert int(metrics["filtered_count"]) == 0


@BOTH_PATHS
def test_drop_is_seeded_order_independent_and_needs_a_surplus(path: str) -> None:
    groups = [[1, 0, 0, 0, 0, 0, 0]]
    fn = RECGroupedAdvantage(drop="balance", drop_seed=3)
    kept_a = {e.eid.uid for e in run(path, fn, make_group_exps(groups))[0]}
    kept_b = {e.eid.uid for e in run(path, fn, list(reversed(make_group_exps(groups))))[0]}
    assert kept_a == kept_b
    assert len(kept_a) == 2
    seeds = {
        frozenset(
            e.eid.uid
            for e in run(path, RECGroupedAdvantage(drop="balance", drop_seed=s), make_group_exps(groups))[0]
        )
        for s in range(8)
    }
    assert len(seeds) > 1  # the seed matters
    # More positives than negatives: nothing is dropped.
    out, metrics = run(path, RECGroupedAdvantage(drop="balance"), make_group_exps([[1, 1, 1, 0]]))
    assert len(out) == 4
    assert int(metrics["filtered_count"]) == 0


@BOTH_PATHS
@pytest.mark.parametrize("reward", [None, math.nan, -math.inf])
def test_non_finite_rewards_are_rejected(path: str, reward: float | None) -> None:
    exps = make_group_exps([[1, 0]])
    exps[0].reward = reward
    with pytest.raises(ValueError, match="finite reward"):
        run(path, RECGroupedAdvantage(), exps)


GRID = st.integers(-8, 8).map(lambda k: k / 4)


@settings(max_examples=40, deadline=None)
@given(
    groups=st.lists(st.lists(GRID, min_size=1, max_size=7), min_size=1, max_size=5),
    order=st.randoms(use_true_random=False),
    std_normalize=st.booleans(),
    drop=st.sampled_from([None, "balance"]),
    keep_dropped=st.booleans(),
    seed=st.integers(0, 3),
)
def test_both_paths_match_the_python_transcription(
    groups: list, order: object, std_normalize: bool, drop: str | None, keep_dropped: bool, seed: int
) -> None:
    args = {"std_normalize": std_normalize, "drop": drop, "keep_dropped": keep_dropped, "drop_seed": seed}
    fn = RECGroupedAdvantage(**args)
    exps = make_group_exps(groups)
    order.shuffle(exps)  # type: ignore[attr-defined]
    expected = python_rec(exps, epsilon=EPS, std_normalize=std_normalize, drop=drop, seed=seed)
    out_v, metrics_v = fn.process_vectorized(list(exps))
    got_v = {e.eid.uid: float(a) for e, a in zip(out_v, scores(out_v).tolist(), strict=True)}
    out_p, metrics_p = fn.process_per_group(list(exps))  # overwrites the advantages of the same objects
    assert [e.eid.uid for e in out_v] == [e.eid.uid for e in out_p]
    assert scores(out_p).tolist() == list(got_v.values())
    want = {u: a for u, (a, d) in expected.items() if keep_dropped or not d}
    assert got_v.keys() == want.keys()
    for uid, value in want.items():
        assert got_v[uid] == pytest.approx(value, rel=1e-6, abs=1e-6)  # advantages are stored as float32
    assert metrics_v.keys() == metrics_p.keys()
    for k in metrics_v:
        torch.testing.assert_close(
            torch.as_tensor(metrics_v[k]).double(), torch.as_tensor(metrics_p[k]).double(), rtol=1e-12, atol=0
        )


def test_process_batch_has_no_host_sync_and_runs_on_meta() -> None:
    exps = make_group_exps([[1, 0, 0, 0], [0.5] * 3, [2.0], [3, 1]])
    batch = ExperienceBatch.from_experiences(exps)
    fn = RECGroupedAdvantage(drop="balance", std_normalize=True)
    keys = torch.tensor([key(e.eid.uid, 0) for e in exps])
    with count_host_syncs() as log:
        advantages, _metrics, keep = fn.scores_from_tensors(
            batch.rewards, batch.group_index["task"], batch.num_groups["task"], keys
        )
    assert len(log) == 0, log.describe()
    assert advantages.shape == keep.shape == (10,)
    n = 9
    meta = {"device": "meta"}
    adv, metrics, keep = fn.scores_from_tensors(
        torch.empty(n, dtype=torch.float64, **meta),
        torch.empty(n, dtype=torch.int64, **meta),
        3,
        torch.empty(n, dtype=torch.int64, **meta),
    )
    assert adv.device.type == "meta"
    assert keep.dtype == torch.bool
    assert all(v.device.type == "meta" for v in metrics.values())


def _lazy_batch(rewards: list[float | None]) -> ExperienceBatch:
    """A trainer-style batch (2 runs per task) whose experiences are made only when read."""
    n = len(rewards)
    rollout = Rollout(
        prompt_ids=torch.full((n, 2), 3),
        prompt_mask=torch.ones(n, 2, dtype=torch.bool),
        response_ids=torch.full((n, 2), 4),
        response_lengths=torch.full((n,), 2),
        truncated=torch.zeros(n, dtype=torch.bool),
    )
    return rollout_batch(rollout, rewards, step=0, group_size=2, group_levels=("task",))


def test_process_batch_checks_rewards_without_making_the_experiences() -> None:
    batch = _lazy_batch([1.0, 0.0, 0.5, 0.5])
    advantages, _metrics, keep = RECGroupedAdvantage().process_batch(batch)
    assert not batch.experiences.materialized  # type: ignore[attr-defined]
    assert advantages.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert keep.all()
    bad = _lazy_batch([1.0, 0.0, math.nan, 0.5])
    with pytest.raises(ValueError, match=r"experience 0/1/0/0/\w+ has reward nan"):
        RECGroupedAdvantage().process_batch(bad)
