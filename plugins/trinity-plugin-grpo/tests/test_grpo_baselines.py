"""dr_grpo, opo, gpg and grpo_passk: hand-derived values, float64 numpy references on random batches,
agreement of the two paths, documented policies, and no host synchronisation."""

from __future__ import annotations

import math

import numpy as np
import pydantic
import pytest
import torch
from grpo_family_support import first_scores, make_exps, numpy_centred, numpy_opo, numpy_passk
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_grpo import DrGRPOAdvantage, GPGAdvantage, GRPOPassKAdvantage, OPOAdvantage
from trinity_plugin_grpo.group_score import GroupScoreAdvantage

from trinity_core.batch import ExperienceBatch
from trinity_core.testing import count_host_syncs

EPS = 1e-6
PATHS = pytest.mark.parametrize("path", ["process_vectorized", "process_per_group"])
CLASSES = [DrGRPOAdvantage, OPOAdvantage, GPGAdvantage, GRPOPassKAdvantage]


def run(fn: GroupScoreAdvantage, path: str, exps: list) -> tuple[np.ndarray, dict]:
    out, metrics = getattr(fn, path)(exps)
    assert [e.eid.uid for e in out] == sorted((e.eid.uid for e in exps), key=[e.eid.uid for e in exps].index)
    for e in out:
        assert torch.equal(e.advantages, e.returns)
    return first_scores(out), metrics


def close(actual: np.ndarray, expected: list[float]) -> None:
    """Experiences hold float32 advantages: compare at float32 precision."""
    np.testing.assert_allclose(actual, np.array(expected), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------- golden values


@PATHS
def test_dr_grpo_golden(path: str) -> None:
    # Group 0: 1, 0, 1 -> mean 2/3. Group 1: four 0.7 -> exactly 0. Group 2: singleton -> 0.
    scores, metrics = run(DrGRPOAdvantage(), path, make_exps([[1, 0, 1], [0.7] * 4, [3.0]]))
    close(scores, [1 / 3, -2 / 3, 1 / 3] + [0.0] * 5)
    assert np.all(scores[3:] == 0.0)
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx((2 / 3 + 0.7) / 2)
    assert float(metrics["group_advantages/reward_mean/max"]) == pytest.approx(0.7)
    assert int(metrics["group_advantages/singleton_count"]) == 1


@PATHS
def test_opo_golden_length_weighted_baseline(path: str) -> None:
    # Group 0: r = 1, 0, 2 with 1, 3, 4 tokens: b = (1·1 + 3·0 + 4·2) / 8 = 9/8.
    # Group 1: r = 0, 1, responses of 4 tokens with 2 and 1 action tokens: b = (2·0 + 1·1) / 3 = 1/3.
    masks = [[[True] * 1, [True] * 3, [True] * 4], [[1, 1, 0, 0], [1, 0, 0, 0]]]
    masks = [[[bool(x) for x in m] for m in g] for g in masks]
    exps = make_exps([[1, 0, 2], [0, 1]], lengths=[[1, 3, 4], [4, 4]], masks=masks)
    scores, _ = run(OPOAdvantage(), path, exps)
    close(scores, [1 - 9 / 8, -9 / 8, 2 - 9 / 8, -1 / 3, 2 / 3])
    assert exps[3].advantages.tolist() == pytest.approx([-1 / 3, -1 / 3, 0.0, 0.0])


def test_opo_group_without_action_tokens_uses_the_plain_mean() -> None:
    exps = make_exps([[0, 1], [2, 4]], lengths=[[2, 2], [2, 2]], masks=[[[False] * 2] * 2, [[True] * 2] * 2])
    advantages, _ = OPOAdvantage().process_batch(ExperienceBatch.from_experiences(exps))
    assert advantages.tolist() == [-0.5, 0.5, -1.0, 1.0]


@PATHS
def test_gpg_golden(path: str) -> None:
    # N = 6 experiences, non-zero rewards 1, 1, 2 -> alpha = 6/3 = 2; f_norm = 2 -> A = (r - 2/3).
    exps = make_exps([[1, 0, 1], [0, 0], [2.0]])
    scores, metrics = run(GPGAdvantage(f_norm=2.0), path, exps)
    close(scores, [1 / 3, -2 / 3, 1 / 3, 0.0, 0.0, 0.0])
    assert float(metrics["group_advantages/alpha"]) == 2.0
    scores, metrics = run(GPGAdvantage(adaptive_alpha=False), path, make_exps([[1, 0, 1], [0, 0], [2.0]]))
    close(scores, [1 / 3, -2 / 3, 1 / 3, 0.0, 0.0, 0.0])
    assert float(metrics["group_advantages/alpha"]) == 1.0


def test_gpg_all_zero_rewards_give_alpha_n_and_zero_advantages() -> None:
    advantages, metrics = GPGAdvantage().process_batch(
        ExperienceBatch.from_experiences(make_exps([[0, 0, 0]]))
    )
    assert float(metrics["group_advantages/alpha"]) == 3.0  # N / max(0, 1)
    assert advantages.tolist() == [0.0, 0.0, 0.0]


@PATHS
def test_passk_golden(path: str) -> None:
    # Group 0: 1, 3, 2 -> best 3, runner-up 2, std 1 -> 1/(1+ε) on the best only.
    # Group 1: 2, 2, 0 -> best shared -> all 0. Group 2: 5, 1 -> gap 4, std 2√2 -> √2. Group 3: singleton.
    exps = make_exps([[1, 3, 2], [2, 2, 0], [5, 1], [7.0]])
    scores, _ = run(GRPOPassKAdvantage(), path, exps)
    close(scores, [0.0, 1 / (1 + EPS), 0.0, 0.0, 0.0, 0.0, 4 / (2 * math.sqrt(2) + EPS), 0.0, 0.0])
    scores, _ = run(GRPOPassKAdvantage(norm_adv_by_std_in_grpo=False), path, make_exps([[1, 3, 2], [5, 1]]))
    close(scores, [0.0, 1.0, 0.0, 4.0, 0.0])


@pytest.mark.parametrize("cls", CLASSES)
def test_zero_variance_and_singleton_groups_are_exactly_zero(cls: type) -> None:
    groups = [[v] * n for v in (0.1, 0.7, 1 / 3, 2.2) for n in (2, 7, 11)] + [[5.0]]
    advantages, _ = cls().process_batch(ExperienceBatch.from_experiences(make_exps(groups)))
    assert torch.equal(advantages, torch.zeros_like(advantages))


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("bad", [None, math.nan, math.inf])
def test_missing_or_non_finite_rewards_are_rejected(cls: type, bad: float | None) -> None:
    exps = make_exps([[0.0, bad]])
    with pytest.raises(ValueError, match="f0r1"):
        cls().process_vectorized(exps)
    with pytest.raises(ValueError, match="f0r1"):
        cls().process_per_group(make_exps([[0.0, bad]]))


def test_args_defaults_and_validation() -> None:
    assert DrGRPOAdvantage.default_args() == {}
    assert OPOAdvantage.default_args() == {}
    assert GPGAdvantage.default_args() == {"f_norm": 1.0, "adaptive_alpha": True}
    assert GRPOPassKAdvantage.default_args() == {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True}
    assert not any(cls.compute_in_trainer() for cls in CLASSES)
    for cls, bad in (
        (GPGAdvantage, {"f_norm": 0.0}),
        (GRPOPassKAdvantage, {"epsilon": -1.0}),
        (DrGRPOAdvantage, {"epsilon": 1e-6}),
    ):
        with pytest.raises(pydantic.ValidationError):
            cls(**bad)


# ---------------------------------------------------------------------------------------- properties

REWARD = st.one_of(st.integers(-4, 4).map(lambda k: k / 2), st.floats(-5, 5, allow_subnormal=False))


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[float]], list[list[int]], list[int]]:
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))
    rewards = [draw(st.lists(REWARD, min_size=n, max_size=n)) for n in sizes]
    lengths = [draw(st.lists(st.integers(1, 6), min_size=n, max_size=n)) for n in sizes]
    order = draw(st.permutations(range(sum(sizes))))
    return rewards, lengths, list(order)


def _flat(data: tuple) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    rewards, lengths, order = data
    exps = [make_exps(rewards, lengths)[i] for i in order]
    r = np.array([e.reward for e in exps])
    index = np.array([e.eid.task for e in exps])
    n = np.array([e.response_length for e in exps])
    return exps, r, index, n


@settings(max_examples=40, deadline=None)
@given(data=batches(), epsilon=st.sampled_from([1e-6, 0.01]), normalize=st.booleans())
def test_vectorized_matches_numpy_references(data: tuple, epsilon: float, normalize: bool) -> None:
    exps, r, index, n = _flat(data)
    batch = ExperienceBatch.from_experiences(exps)
    tol = {"rtol": 1e-9, "atol": 1e-9}
    np.testing.assert_allclose(
        DrGRPOAdvantage().process_batch(batch)[0].numpy(), numpy_centred(r, index), **tol
    )
    np.testing.assert_allclose(OPOAdvantage().process_batch(batch)[0].numpy(), numpy_opo(r, n, index), **tol)
    alpha = len(r) / max(int((r != 0).sum()), 1)
    np.testing.assert_allclose(
        GPGAdvantage(f_norm=0.5).process_batch(batch)[0].numpy(), alpha * numpy_centred(r, index) / 0.5, **tol
    )
    passk = GRPOPassKAdvantage(epsilon=epsilon, norm_adv_by_std_in_grpo=normalize)
    np.testing.assert_allclose(
        passk.process_batch(batch)[0].numpy(), numpy_passk(r, index, epsilon, normalize), **tol
    )


@settings(max_examples=25, deadline=None)
@given(data=batches(), cls=st.sampled_from(CLASSES))
def test_vectorized_and_per_group_paths_agree(data: tuple, cls: type) -> None:
    rewards, lengths, order = data
    a = [make_exps(rewards, lengths)[i] for i in order]
    b = [make_exps(rewards, lengths)[i] for i in order]
    out_a, metrics_a = cls().process_vectorized(a)
    out_b, metrics_b = cls().process_per_group(b)
    assert [e.eid.uid for e in out_a] == [e.eid.uid for e in out_b]
    np.testing.assert_allclose(first_scores(out_a), first_scores(out_b), rtol=1e-9, atol=1e-12)
    assert metrics_a.keys() == metrics_b.keys()
    for key in metrics_a:
        torch.testing.assert_close(
            torch.as_tensor(metrics_a[key]).double(),
            torch.as_tensor(metrics_b[key]).double(),
            rtol=1e-9,
            atol=1e-12,
        )


def test_gpg_groups_are_independent_only_without_adaptive_alpha() -> None:
    before = make_exps([[1, 0, 1], [2, 3]])
    after = make_exps([[1, 0, 1], [0, 0]])  # group 1 now has no non-zero reward: alpha 5/4 -> 5/2
    fixed = GPGAdvantage(adaptive_alpha=False)
    assert (
        first_scores(fixed.process(before)[0])[:3].tolist()
        == first_scores(fixed.process(after)[0])[:3].tolist()
    )
    adaptive = GPGAdvantage()
    close(
        first_scores(adaptive.process(before)[0])[:3] * 2,
        first_scores(adaptive.process(after)[0])[:3].tolist(),
    )


# ---------------------------------------------------------------------------------------- host sync


@pytest.mark.parametrize("cls", CLASSES)
def test_process_batch_has_no_host_sync(cls: type) -> None:
    batch = ExperienceBatch.from_experiences(make_exps([[0, 1, 1], [0.7] * 4, [2.0], [3, 1]]))
    fn = cls()
    with count_host_syncs() as log:
        advantages, metrics = fn.process_batch(batch)
    assert len(log) == 0, log.describe()
    assert advantages.shape == (10,)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())


@pytest.mark.parametrize("cls", CLASSES)
def test_kernels_run_on_the_meta_device(cls: type) -> None:
    # Meta tensors carry no data: a value read on the host would raise.
    n, groups = 12, 4
    rewards = torch.empty(n, dtype=torch.float64, device="meta")
    lengths = torch.empty(n, dtype=torch.int64, device="meta")
    index = torch.empty(n, dtype=torch.int64, device="meta")
    fn = cls()
    scores = fn.group_scores(rewards, lengths, index, groups, fn.batch_context(rewards, lengths))
    assert scores.advantages.device.type == "meta"
    assert scores.advantages.shape == (n,)
    assert scores.group_mean.shape == (groups,)
