"""Property tests: every trainer-side function against a textbook float64 loop on random batches (holes in
the action mask, token-level rewards, singletons), no host synchronisation, masked garbage ignored."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reinforce_support import (
    Spec,
    make_batch,
    np_group_centred,
    np_masked_returns,
    np_rloo,
    np_whiten,
    scores_of,
)
from trinity_plugin_reinforce import (
    REINFORCEGroupAdvantage,
    REINFORCEPLUSPLUSAdvantageFn,
    REINFORCEPlusPlusBaselineAdvantageFn,
    REMAXAdvantageFn,
    RLOOAdvantageFn,
)
from trinity_plugin_reinforce.kernel import discounted_returns, leave_one_out, sequence_scores

from trinity_core.batch import ExperienceBatch
from trinity_core.testing import count_host_syncs

REWARD = st.one_of(st.integers(-4, 4).map(lambda k: k / 2), st.floats(-3, 3, allow_subnormal=False))


@st.composite
def specs(draw: st.DrawFn, token_rewards: bool | None = None) -> list[Spec]:
    """1..5 task groups of 1..4 responses of 1..7 tokens with random action masks (>= 1 action token)."""
    use_tokens = draw(st.booleans()) if token_rewards is None else token_rewards
    out = []
    for task, size in enumerate(draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))):
        for run in range(size):
            n = draw(st.integers(1, 7))
            mask = draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any))
            tokens = draw(st.lists(REWARD, min_size=n, max_size=n)) if use_tokens else None
            out.append(Spec(task, draw(REWARD), mask, tokens, run))
    return draw(st.permutations(out))


def arrays(batch: ExperienceBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    mask = batch.action_mask.numpy()
    lengths = batch.response_lengths.numpy()
    groups = np.array([e.eid.task for e in batch.experiences])
    return scores_of(batch), mask, lengths, groups


@settings(max_examples=25, deadline=None)
@given(data=specs(), gamma=st.sampled_from([1.0, 0.9, 0.5, 0.0]))
def test_reinforceplusplus_matches_the_textbook_loop(data: list[Spec], gamma: float) -> None:
    batch = make_batch(data)
    scores, mask, lengths, _ = arrays(batch)
    returns = np_masked_returns(scores, lengths, mask, gamma)
    REINFORCEPLUSPLUSAdvantageFn(gamma=gamma)(batch)
    np.testing.assert_allclose(
        batch.returns.double().numpy(), np.where(mask, returns, 0), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        batch.advantages.double().numpy(), np_whiten(returns, mask), rtol=1e-4, atol=1e-4
    )


@settings(max_examples=25, deadline=None)
@given(data=specs())
def test_rloo_matches_the_leave_one_out_loop(data: list[Spec]) -> None:
    batch = make_batch(data)
    scores, mask, lengths, groups = arrays(batch)
    s = np.where(np.arange(scores.shape[1]) < lengths[:, None], scores, 0).sum(1)
    RLOOAdvantageFn()(batch)
    np.testing.assert_allclose(
        batch.advantages.double().numpy(),
        np.where(mask, np_rloo(s, groups)[:, None], 0),
        rtol=1e-5,
        atol=1e-5,
    )


@settings(max_examples=25, deadline=None)
@given(data=specs())
def test_reinforce_plus_plus_baseline_matches_the_loop(data: list[Spec]) -> None:
    batch = make_batch(data)
    scores, mask, _, groups = arrays(batch)
    centred = np_group_centred(scores.sum(1), groups)
    REINFORCEPlusPlusBaselineAdvantageFn()(batch)
    expected = np_whiten(np.broadcast_to(centred[:, None], mask.shape), mask)
    np.testing.assert_allclose(batch.advantages.double().numpy(), expected, rtol=1e-4, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(data=specs(), baselines=st.lists(REWARD, min_size=20, max_size=20))
def test_remax_matches_the_loop(data: list[Spec], baselines: list[float]) -> None:
    b = torch.tensor(baselines[: len(data)], dtype=torch.float64)
    batch = make_batch(data, extras={"reward_baselines": b})
    scores, mask, lengths, _ = arrays(batch)
    returns = np_masked_returns(scores, lengths, mask, 1.0)
    REMAXAdvantageFn()(batch)
    expected = np.where(mask, returns - b.numpy()[:, None], 0)
    np.testing.assert_allclose(batch.advantages.double().numpy(), expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(data=specs(token_rewards=False))
def test_rloo_and_zero_variance_groups_are_exactly_zero(data: list[Spec]) -> None:
    flat = [Spec(s.task, float(s.task) / 3, s.mask, None, s.run) for s in data]  # constant per group
    batch = make_batch(flat)
    RLOOAdvantageFn()(batch)
    assert torch.equal(batch.advantages, torch.zeros_like(batch.advantages))


@settings(max_examples=25, deadline=None)
@given(data=specs(token_rewards=False))
def test_reinforce_paths_agree(data: list[Spec]) -> None:
    from reinforce_support import make_exps

    a, metrics_a = REINFORCEGroupAdvantage().process_vectorized(make_exps(data))
    b, metrics_b = REINFORCEGroupAdvantage().process_per_group(make_exps(data))
    assert [e.eid.uid for e in a] == [e.eid.uid for e in b]
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.advantages, y.advantages)
        assert torch.equal(x.advantages, x.reward * x.action_mask.float())
    assert metrics_a.keys() == metrics_b.keys()
    for key in metrics_a:
        assert float(metrics_a[key]) == pytest.approx(float(metrics_b[key]), rel=1e-12, abs=1e-12)


TRAINER_FNS = [
    REINFORCEPLUSPLUSAdvantageFn(gamma=0.9),
    REINFORCEPlusPlusBaselineAdvantageFn(),
    RLOOAdvantageFn(),
    REMAXAdvantageFn(),
]


def _sample_batch() -> ExperienceBatch:
    specs_ = [
        Spec(0, 1.0, [True, False, True]),
        Spec(0, 0.0, [True] * 5),
        Spec(1, 2.0, [True, True]),
        Spec(2, 0.5, [False, True, True, True]),
        Spec(2, 0.5, [True]),
    ]
    return make_batch(specs_, extras={"reward_baselines": torch.tensor([0.5, 0.0, 1.0, 0.2, 0.1])})


@pytest.mark.parametrize("fn", TRAINER_FNS, ids=lambda f: type(f).__name__)
def test_trainer_functions_never_sync_with_the_host(fn: object) -> None:
    batch = _sample_batch()
    with count_host_syncs() as log:
        advantages, returns, metrics = fn.compute(batch)  # type: ignore[attr-defined]
    assert len(log) == 0, log.describe()
    assert advantages.shape == returns.shape == (5, 5)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())


def test_reinforce_process_batch_never_syncs() -> None:
    batch = _sample_batch()
    with count_host_syncs() as log:
        REINFORCEGroupAdvantage().process_batch(batch)
    assert len(log) == 0, log.describe()


@pytest.mark.parametrize("fn", TRAINER_FNS, ids=lambda f: type(f).__name__)
def test_garbage_at_padding_is_ignored(fn: object) -> None:
    clean = _sample_batch()
    fn(clean)  # type: ignore[operator]
    dirty = _sample_batch()
    scores = dirty.token_level_scores()
    dirty.token_level_reward = torch.where(dirty.response_mask, scores, math.nan)
    fn(dirty)  # type: ignore[operator]
    assert torch.equal(clean.advantages, dirty.advantages)
    assert torch.equal(clean.returns, dirty.returns)


def test_kernel_runs_on_the_meta_device() -> None:
    # Meta tensors hold no data: any host read would raise, so this proves the kernels never need one.
    n, r, groups = 6, 9, 3
    rewards = torch.empty(n, r, device="meta")
    mask = torch.empty(n, r, dtype=torch.bool, device="meta")
    returns = discounted_returns(rewards, mask, mask, 0.9)
    assert returns.shape == (n, r)
    assert returns.device.type == "meta"
    s = sequence_scores(rewards, mask)
    advantages, sizes = leave_one_out(s, torch.empty(n, dtype=torch.int64, device="meta"), groups)
    assert advantages.shape == sizes.shape == (n,)


def test_scan_matches_the_loop_on_long_responses() -> None:
    # 300 tokens: ⌈log2 300⌉ = 9 scan steps, γ^k products down to 0.9^300 ≈ 2e-14.
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(3, 300, generator=g, dtype=torch.float64)
    mask = torch.rand(3, 300, generator=g) > 0.2
    full = torch.ones(3, 300, dtype=torch.bool)
    got = discounted_returns(rewards, full, mask, 0.9)
    expected = np_masked_returns(rewards.numpy(), np.full(3, 300), mask.numpy(), 0.9)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)
