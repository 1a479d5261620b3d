"""Property tests: the vectorized path against a numpy float64 reference and against the per-group path;
no host synchronisation in the numeric part."""

from __future__ import annotations

import numpy as np
import torch
from grpo_support import interleave, make_group_exps, numpy_grpo, scores
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_grpo import GRPOGroupedAdvantage
from trinity_plugin_grpo.kernel import grpo_scores

from trinity_core.batch import ExperienceBatch
from trinity_core.testing.host_syncs import count_host_syncs

# Rewards on a quarter grid make ties (zero-variance groups, equal log-probs) frequent and exact;
# free floats cover the general case.
REWARD = st.one_of(st.integers(-8, 8).map(lambda k: k / 4), st.floats(-5, 5, allow_subnormal=False))
LOGPROB = st.integers(-6, 0).map(lambda k: k / 2)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[float]], list[list[float]], list[int]]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    rewards = [draw(st.lists(REWARD, min_size=n, max_size=n)) for n in sizes]
    logprobs = [draw(st.lists(LOGPROB, min_size=n, max_size=n)) for n in sizes]
    order = draw(st.permutations(range(sum(sizes))))
    return rewards, logprobs, list(order)


OPTIONS = st.fixed_dictionaries(
    {
        "epsilon": st.sampled_from([1e-6, 1e-3]),
        "std_threshold": st.sampled_from([None, 0.0, 0.3]),
        "rank_penalty": st.sampled_from([None, 0.25, 1.0]),
        "std_cal_level": st.sampled_from(["group", "batch"]),
    }
)


@settings(max_examples=60, deadline=None)
@given(data=batches(), options=OPTIONS)
def test_vectorized_matches_numpy_reference(data: tuple, options: dict) -> None:
    rewards, logprobs, order = data
    exps = interleave(make_group_exps(rewards, logprobs), order)
    groups = np.array([e.eid.task for e in exps])
    first_seen = {g: i for i, g in reversed(list(enumerate(groups)))}
    expected, keep = numpy_grpo(
        np.array([e.reward for e in exps]),
        groups,
        np.array([float(e.logprobs[0]) for e in exps]),
        **options,
    )
    batch = ExperienceBatch.from_experiences(exps)
    advantages, _, kept = GRPOGroupedAdvantage(**options).process_batch(batch)
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-9, atol=1e-12)
    assert kept.numpy().tolist() == keep.tolist()
    # The list path returns the kept experiences grouped, groups in first-appearance order.
    out, _ = GRPOGroupedAdvantage(**options).process_vectorized(exps)
    expected_order = sorted((i for i in range(len(exps)) if keep[i]), key=lambda i: first_seen[groups[i]])
    assert [id(e) for e in out] == [id(exps[i]) for i in expected_order]


@settings(max_examples=40, deadline=None)
@given(data=batches(), options=OPTIONS, duplicate=st.booleans())
def test_vectorized_and_per_group_paths_agree(data: tuple, options: dict, duplicate: bool) -> None:
    rewards, logprobs, order = data
    fn = GRPOGroupedAdvantage(**options, duplicate_experiences=duplicate)
    a = interleave(make_group_exps(rewards, logprobs), order)
    b = interleave(make_group_exps(rewards, logprobs), order)
    for x, y in zip(a, b, strict=True):
        y.eid = x.eid  # identical EIDs, so duplicate suffixes match too
    out_a, metrics_a = fn.process_vectorized(a)
    out_b, metrics_b = fn.process_per_group(b)
    assert [e.eid.uid for e in out_a] == [e.eid.uid for e in out_b]
    torch.testing.assert_close(scores(out_a), scores(out_b), rtol=1e-9, atol=1e-12)
    assert metrics_a.keys() == metrics_b.keys()
    for key in metrics_a:
        torch.testing.assert_close(
            torch.as_tensor(metrics_a[key]).double(),
            torch.as_tensor(metrics_b[key]).double(),
            rtol=1e-9,
            atol=1e-12,
        )
    if duplicate and options["std_threshold"] is not None and out_a:
        assert len(out_a) == len(a)


@settings(max_examples=30, deadline=None)
@given(data=batches(), options=OPTIONS)
def test_zero_variance_and_singleton_groups_are_exactly_zero(data: tuple, options: dict) -> None:
    rewards, logprobs, _ = data
    flat = [[g[0]] * len(g) for g in rewards]  # every group constant
    batch = ExperienceBatch.from_experiences(make_group_exps(flat, logprobs))
    options = {**options, "rank_penalty": None}
    advantages, _, _ = GRPOGroupedAdvantage(**options).process_batch(batch)
    assert torch.equal(advantages, torch.zeros_like(advantages))


def test_process_batch_has_no_host_sync() -> None:
    exps = interleave(
        make_group_exps([[0, 1, 1], [0.7] * 5, [2.0], [3, 1]], [[0, -1, -2], [0] * 5, [0], [-1, 0]]),
        [5, 0, 9, 1, 6, 2, 3, 10, 4, 7, 8],
    )
    batch = ExperienceBatch.from_experiences(exps)
    for options in ({}, {"rank_penalty": 0.5, "std_threshold": 0.1, "std_cal_level": "batch"}):
        fn = GRPOGroupedAdvantage(**options)
        with count_host_syncs() as log:
            advantages, _metrics, _keep = fn.process_batch(batch)
        assert len(log) == 0, log.describe()
        assert advantages.shape == (11,)


def test_kernel_runs_on_the_meta_device() -> None:
    # Meta tensors carry no data: any value read (item, bool, boolean indexing, data-dependent shapes)
    # raises, so success proves the numeric core never needs the host.
    n, groups = 12, 4
    rewards = torch.empty(n, dtype=torch.float64, device="meta")
    index = torch.empty(n, dtype=torch.int64, device="meta")
    lp = torch.empty(n, dtype=torch.float64, device="meta")
    fn = GRPOGroupedAdvantage(rank_penalty=0.5, std_threshold=0.1, std_cal_level="batch")
    advantages, metrics, keep = fn.scores_from_tensors(rewards, index, groups, lp)
    assert advantages.device.type == "meta"
    assert advantages.shape == (n,)
    assert keep.shape == (n,)
    assert keep.dtype == torch.bool
    assert all(v.device.type == "meta" for v in metrics.values())
    s = grpo_scores(rewards, index, groups)
    assert s.group_mean.shape == (groups,)
