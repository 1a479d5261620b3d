"""Property tests: vectorized OPMD/AsymRE against a numpy float64 transcription and the per-group path; no
host synchronisation; the kernel runs on the meta device."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from opmd_support import interleave, make_group_exps, np_advantages, scores
from trinity_plugin_opmd import ASYMREGroupAdvantage, OPMDGroupAdvantage
from trinity_plugin_opmd.kernel import group_baselines

from trinity_core.batch import ExperienceBatch
from trinity_core.testing import count_host_syncs

REWARD = st.one_of(st.integers(-8, 8).map(lambda k: k / 4), st.floats(-50, 50, allow_subnormal=False))


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[float]], list[int]]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    rewards = [draw(st.lists(REWARD, min_size=n, max_size=n)) for n in sizes]
    return rewards, list(draw(st.permutations(range(sum(sizes)))))


FUNCTIONS = st.sampled_from(
    [
        ("mean", 1.0, 0.0),
        ("logavgexp", 1.0, 0.0),
        ("logavgexp", 0.05, 0.0),
        ("logavgexp", 20.0, 0.0),
        ("mean", 1.0, -0.1),
        ("mean", 1.0, 0.3),
    ]
)


def build(baseline: str, tau: float, shift: float) -> OPMDGroupAdvantage | ASYMREGroupAdvantage:
    if shift:
        return ASYMREGroupAdvantage(baseline_shift=shift)
    return OPMDGroupAdvantage(opmd_baseline=baseline, tau=tau)


@settings(max_examples=40, deadline=None)
@given(data=batches(), options=FUNCTIONS)
def test_vectorized_matches_numpy(data: tuple, options: tuple) -> None:
    rewards, order = data
    exps = interleave(make_group_exps(rewards), order)
    expected = np_advantages(
        np.array([e.reward for e in exps]), np.array([e.eid.task for e in exps]), *options
    )
    advantages, _ = build(*options).process_batch(ExperienceBatch.from_experiences(exps))
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-9, atol=1e-9)


@settings(max_examples=20, deadline=None)
@given(data=batches(), options=FUNCTIONS)
def test_vectorized_and_per_group_paths_agree(data: tuple, options: tuple) -> None:
    rewards, order = data
    fn = build(*options)
    out_a, metrics_a = fn.process_vectorized(interleave(make_group_exps(rewards), order))
    out_b, metrics_b = fn.process_per_group(interleave(make_group_exps(rewards), order))
    assert [e.eid.uid for e in out_a] == [e.eid.uid for e in out_b]
    torch.testing.assert_close(scores(out_a), scores(out_b), rtol=0, atol=0)
    assert metrics_a.keys() == metrics_b.keys()
    for key in metrics_a:
        assert float(metrics_a[key]) == pytest.approx(float(metrics_b[key]), rel=1e-12, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(data=batches(), options=FUNCTIONS)
def test_flat_groups_and_singletons_get_exactly_minus_the_shift(data: tuple, options: tuple) -> None:
    rewards, _ = data
    flat = [[g[0]] * len(g) for g in rewards]
    advantages, _ = build(*options).process_batch(ExperienceBatch.from_experiences(make_group_exps(flat)))
    assert torch.equal(advantages, torch.full_like(advantages, -options[2]))


@settings(max_examples=30, deadline=None)
@given(data=batches(), tau=st.floats(0.01, 100))
def test_logavgexp_lies_between_mean_and_max(data: tuple, tau: float) -> None:
    rewards, _ = data
    flat = torch.tensor([r for g in rewards for r in g], dtype=torch.float64)
    index = torch.tensor([i for i, g in enumerate(rewards) for _ in g])
    b = group_baselines(flat, index, len(rewards), "logavgexp", tau)
    top = torch.tensor([max(g) for g in rewards], dtype=torch.float64)
    assert bool((b.baseline <= top + 1e-9).all())
    assert bool((b.baseline >= b.reward_mean - 1e-9 * (1 + b.reward_mean.abs())).all())


@pytest.mark.parametrize(
    "fn", [OPMDGroupAdvantage(), OPMDGroupAdvantage(opmd_baseline="logavgexp"), ASYMREGroupAdvantage()]
)
def test_process_batch_never_syncs(fn: object) -> None:
    exps = interleave(
        make_group_exps([[0, 1, 1], [0.7] * 5, [2.0], [3, 1]]), [5, 0, 9, 1, 6, 2, 3, 10, 4, 7, 8]
    )
    batch = ExperienceBatch.from_experiences(exps)
    with count_host_syncs() as log:
        advantages, _ = fn.process_batch(batch)  # type: ignore[attr-defined]
    assert len(log) == 0, log.describe()
    assert advantages.shape == (11,)


@pytest.mark.parametrize("baseline", ["mean", "logavgexp"])
def test_kernel_runs_on_the_meta_device(baseline: str) -> None:
    rewards = torch.empty(10, dtype=torch.float64, device="meta")
    index = torch.empty(10, dtype=torch.int64, device="meta")
    b = group_baselines(rewards, index, 4, baseline, 0.5, shift=-0.1)  # type: ignore[arg-type]
    assert b.baseline.shape == (4,)
    assert b.advantages(rewards, index).device.type == "meta"
