"""Comparison with the published reference (trinity-rft 0.6.0 ``GRPOGroupedAdvantage``): agreement where
the reference is right, and the documented differences where it is not (docs/reference-differences.md)."""

from __future__ import annotations

import math

import pytest
import torch
from grpo_support import interleave, make_group_exps, scores
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_grpo import GRPOGroupedAdvantage

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_cls() -> type:
    return import_reference("trinity.algorithm.advantage_fn.grpo_advantage").GRPOGroupedAdvantage


@st.composite
def informative_batches(draw: st.DrawFn) -> tuple[list[list[float]], list[int]]:
    """Groups of 2..6 integer rewards with at least two distinct values each (no singleton, no flat group)."""
    groups = []
    for n in draw(st.lists(st.integers(2, 6), min_size=1, max_size=5)):
        rewards = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n).filter(lambda r: len(set(r)) > 1))
        groups.append([float(r) for r in rewards])
    order = draw(st.permutations(range(sum(len(g) for g in groups))))
    return groups, list(order)


@settings(max_examples=40, deadline=None)
@given(
    data=informative_batches(),
    level=st.sampled_from(["group", "batch"]),
    threshold=st.sampled_from([None, 0.0, 1.0]),
    epsilon=st.sampled_from([1e-6, 0.01]),
)
def test_agrees_with_the_reference_on_informative_groups(
    data: tuple, level: str, threshold: float | None, epsilon: float
) -> None:
    groups, order = data
    args = {"epsilon": epsilon, "std_threshold": threshold, "std_cal_level": level}
    ours, our_metrics = GRPOGroupedAdvantage(**args)(interleave(make_group_exps(groups), order))
    theirs, their_metrics = reference_cls()(**args)(interleave(make_group_exps(groups), order))
    assert [e.eid.uid for e in ours] == [e.eid.uid for e in theirs]
    torch.testing.assert_close(scores(ours), scores(theirs), rtol=1e-5, atol=1e-5)
    assert int(our_metrics["filtered_count"]) == their_metrics["filtered_count"]
    for key in ("reward_mean/mean", "reward_mean/max", "reward_std/min", "reward_std/max"):
        if f"group_advantages/{key}" in their_metrics:
            assert float(our_metrics[f"group_advantages/{key}"]) == pytest.approx(
                their_metrics[f"group_advantages/{key}"], rel=1e-5, abs=1e-6
            )


def test_rank_penalty_numerator_differs_from_the_reference() -> None:
    # Same statistics of the corrected rewards r' in both; the reference subtracts them from the raw
    # reward r (rank-penalty), we from r'. Full action masks, so its unmasked mean log-prob is ours too.
    groups, lps = [[0.0, 1.0, 2.0, 3.0]], [[0.0, 0.1, 0.2, 0.3]]
    ours, metrics = GRPOGroupedAdvantage(rank_penalty=0.2)(make_group_exps(groups, lps))
    theirs, _ = reference_cls()(rank_penalty=0.2)(make_group_exps(groups, lps))
    mean = float(metrics["group_advantages/reward_mean/mean"])
    std = float(metrics["group_advantages/reward_std/mean"])
    raw = torch.tensor(groups[0], dtype=torch.float64)
    corrected = raw * (1 - 0.2 * torch.arange(4, dtype=torch.float64) / 4)
    torch.testing.assert_close(scores(theirs), (raw - mean) / (std + 1e-6), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scores(ours), (corrected - mean) / (std + 1e-6), rtol=1e-6, atol=1e-7)
    assert not torch.allclose(scores(ours), scores(theirs), atol=1e-3)
    assert float(scores(ours).sum()) == pytest.approx(0.0, abs=1e-6)  # ours are centred, theirs not
    assert float(scores(theirs).sum()) > 0.1


@pytest.mark.parametrize("level", ["group", "batch"])
def test_singletons_get_zero_where_the_reference_uses_the_raw_reward(level: str) -> None:
    groups = [[0.0, 2.0], [3.0]]
    ours, our_metrics = GRPOGroupedAdvantage(std_cal_level=level)(make_group_exps(groups))
    theirs, their_metrics = reference_cls()(std_cal_level=level)(make_group_exps(groups))
    assert float(scores(ours)[2]) == 0.0
    # Reference: r/(1+ε) in group mode, r/(σ_batch+ε) in batch mode with σ_batch over 0, 2, 3.
    sigma = 1.0 if level == "group" else float(torch.tensor([0.0, 2.0, 3.0]).std())
    assert float(scores(theirs)[2]) == pytest.approx(3.0 / (sigma + 1e-6), rel=1e-5)
    # Its singleton placeholders (mean 0, std 1) enter the statistics; ours are excluded.
    assert their_metrics["group_advantages/reward_std/min"] == pytest.approx(1.0)
    assert their_metrics["group_advantages/reward_mean/min"] == pytest.approx(0.0)
    assert float(our_metrics["group_advantages/reward_std/min"]) == pytest.approx(math.sqrt(2.0))
    assert float(our_metrics["group_advantages/reward_mean/min"]) == pytest.approx(1.0)


def test_zero_variance_group_is_exactly_zero() -> None:
    # Equal rewards must give exactly 0. The reference's float32 mean of n copies of v is not always v,
    # and a deviation of one ulp divided by (std + 1e-6) is far from 0 (zero-variance-groups).
    candidates = [[v] * n for v in (0.1, 0.7, 1 / 3, 0.3, 2.2) for n in (3, 5, 6, 7, 9, 11)]
    worst_reference = 0.0
    for group in candidates:
        ours, _ = GRPOGroupedAdvantage()(make_group_exps([group]))
        theirs, _ = reference_cls()()(make_group_exps([group]))
        assert torch.equal(scores(ours), torch.zeros(len(group), dtype=torch.float64))
        worst_reference = max(worst_reference, float(scores(theirs).abs().max()))
    assert worst_reference > 1e-3  # the defect shows on at least one of these groups


def test_reference_duplicates_collide_on_uid_ours_do_not() -> None:
    groups = [[1.0, 1.0], [0.0, 1.0], [2.0, 2.0]]
    args = {"std_threshold": 0.0, "duplicate_experiences": True}
    torch.manual_seed(0)
    theirs, _ = reference_cls()(**args)(make_group_exps(groups))
    ours, _ = GRPOGroupedAdvantage(**args)(make_group_exps(groups))
    assert len({e.eid.uid for e in theirs}) < len(theirs)
    assert len(ours) == 6
    assert len({e.eid.uid for e in ours}) == 6
