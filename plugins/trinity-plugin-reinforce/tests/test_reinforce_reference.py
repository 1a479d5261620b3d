"""Comparison with the published reference (trinity-rft 0.6.0): agreement on random inputs where the
reference is right, and the documented differences (docs/reference-differences.md: singleton-groups,
gae-masks, missing-columns)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from reinforce_support import Spec, group_specs, make_batch, make_exps, reference_module, reference_proto
from trinity_plugin_reinforce import (
    REINFORCEGroupAdvantage,
    REINFORCEPLUSPLUSAdvantageFn,
    REMAXAdvantageFn,
    RLOOAdvantageFn,
)

pytestmark = pytest.mark.reference

REWARD = st.integers(-6, 6).map(lambda k: k / 3)


@st.composite
def full_mask_specs(draw: st.DrawFn, min_group: int = 1) -> list[Spec]:
    """Task groups of responses of 1..6 tokens without holes (the reference ignores action masks)."""
    out = []
    for task, size in enumerate(draw(st.lists(st.integers(min_group, 4), min_size=1, max_size=4))):
        for run in range(size):
            out.append(Spec(task, draw(REWARD), [True] * draw(st.integers(1, 6)), run=run))
    return draw(st.permutations(out))


@settings(max_examples=30, deadline=None)
@given(data=full_mask_specs())
def test_reinforce_agrees_with_the_reference(data: list[Spec]) -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.reinforce_advantage").REINFORCEGroupAdvantage()
    ours, our_metrics = REINFORCEGroupAdvantage()(make_exps(data))
    theirs, their_metrics = ref(make_exps(data))
    assert [e.eid.uid for e in ours] == [e.eid.uid for e in theirs]
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.advantages, b.advantages.float())
    for key, value in their_metrics.items():
        assert float(our_metrics[key]) == pytest.approx(value, rel=1e-6, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(data=full_mask_specs(), gamma=st.sampled_from([1.0, 0.95, 0.5]))
def test_reinforceplusplus_agrees_with_the_reference_without_holes(data: list[Spec], gamma: float) -> None:
    assume(sum(len(s.mask) for s in data) >= 2)  # the reference raises below two tokens (gae-masks)
    ref = reference_module("trinity.algorithm.advantage_fn.reinforce_plus_plus_advantage")
    batch = make_batch(data)
    proto = reference_proto(batch)
    ref.REINFORCEPLUSPLUSAdvantageFn(gamma=gamma)(proto)
    REINFORCEPLUSPLUSAdvantageFn(gamma=gamma)(batch)
    mask = batch.response_mask
    # Equal returns: the reference's float32 rounding error is amplified by 1/sqrt(1e-8) (tested below).
    assume(float(proto.batch["returns"][mask].std()) > 0.05)
    # Their masked_mean divides by (count + 1e-8): agreement to ~1e-6.
    torch.testing.assert_close(
        batch.advantages, torch.where(mask, proto.batch["advantages"], 0.0), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        batch.returns, torch.where(mask, proto.batch["returns"], 0.0), rtol=1e-6, atol=1e-6
    )


@settings(max_examples=30, deadline=None)
@given(data=full_mask_specs(min_group=2))
def test_rloo_agrees_with_the_reference_without_singletons(data: list[Spec]) -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.rloo_advantage").RLOOAdvantageFn()
    batch = make_batch(data)
    proto = reference_proto(batch)
    ref(proto)
    RLOOAdvantageFn()(batch)
    torch.testing.assert_close(batch.advantages, proto.batch["advantages"], rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(data=full_mask_specs(), baselines=st.lists(REWARD, min_size=16, max_size=16))
def test_remax_agrees_with_the_reference(data: list[Spec], baselines: list[float]) -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.remax_advantage").REMAXAdvantageFn()
    b = torch.tensor(baselines[: len(data)], dtype=torch.float32)
    batch = make_batch(data, extras={"reward_baselines": b})
    proto = reference_proto(batch, reward_baselines=b)
    ref(proto)
    REMAXAdvantageFn()(batch)
    mask = batch.response_mask
    torch.testing.assert_close(
        batch.advantages, torch.where(mask, proto.batch["advantages"], 0.0), rtol=1e-6, atol=1e-6
    )
    torch.testing.assert_close(batch.returns, proto.batch["returns"], rtol=1e-6, atol=1e-6)


def test_rloo_singleton_gets_zero_where_the_reference_uses_the_raw_score() -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.rloo_advantage").RLOOAdvantageFn()
    batch = make_batch(group_specs([[1.0, 0.0], [3.0]], length=2))
    proto = reference_proto(batch)
    ref(proto)
    RLOOAdvantageFn()(batch)
    torch.testing.assert_close(batch.advantages[:2], proto.batch["advantages"][:2])
    assert torch.equal(batch.advantages[2], torch.zeros(2))
    assert torch.equal(proto.batch["advantages"][2], torch.full((2,), 3.0))


def test_reinforceplusplus_holes_differ_from_the_reference_as_documented() -> None:
    # Action mask (1, 0, 1, 1), reward 1 on the last token, γ = 0.5: ours H_0 = γ² (two decisions
    # separate token 0 from the reward), the reference's G_0 = γ³ (it discounts through the hole).
    # Whitening then runs over ours action tokens, over every response token in the reference.
    ref = reference_module("trinity.algorithm.advantage_fn.reinforce_plus_plus_advantage")
    batch = make_batch([Spec(0, 1.0, [True, False, True, True]), Spec(1, 1.0, [True] * 4)])
    proto = reference_proto(batch)
    ref.REINFORCEPLUSPLUSAdvantageFn(gamma=0.5)(proto)
    REINFORCEPLUSPLUSAdvantageFn(gamma=0.5)(batch)
    assert float(batch.returns[0, 0]) == pytest.approx(0.25)
    assert float(proto.batch["returns"][0, 0]) == pytest.approx(0.125)
    # Row 1 has no hole: identical returns.
    torch.testing.assert_close(batch.returns[1], proto.batch["returns"][1])


def test_remax_missing_column_the_reference_fails_bare() -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.remax_advantage").REMAXAdvantageFn()
    batch = make_batch([Spec(0, 1.0, [True])])
    with pytest.raises(KeyError) as theirs:
        ref(reference_proto(batch))
    with pytest.raises(KeyError) as ours:
        REMAXAdvantageFn()(batch)
    assert "greedy" not in str(theirs.value)
    assert "greedy" in str(ours.value)


def test_reinforce_groups_match_the_reference_metric_layout() -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.reinforce_advantage").REINFORCEGroupAdvantage()
    _, theirs = ref(make_exps(group_specs([[1.0, 2.0], [0.0]])))
    _, ours = REINFORCEGroupAdvantage()(make_exps(group_specs([[1.0, 2.0], [0.0]])))
    assert set(theirs) == set(ours)
    assert np.isclose(float(ours["group_advantages/reward_mean/mean"]), 0.75)


def test_reinforceplusplus_single_token_batch_is_finite_where_the_reference_raises() -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.reinforce_plus_plus_advantage")
    batch = make_batch([Spec(0, 2.0, [True])])
    with pytest.raises(ValueError, match="sum of the mask is one"):
        ref.REINFORCEPLUSPLUSAdvantageFn()(reference_proto(batch))
    REINFORCEPLUSPLUSAdvantageFn()(batch)
    assert torch.equal(batch.advantages, torch.zeros(1, 1))  # one value: no spread, whitened to 0
    assert float(batch.returns[0, 0]) == 2.0


def test_reinforceplusplus_equal_returns_whiten_to_exactly_zero_unlike_the_reference() -> None:
    # Seven tokens of return 1/3: variance 0. Ours computes in float64 from a float32 input whose copies
    # are equal, so every deviation is exactly 0; the reference's float32 mean is one ulp off and the
    # deviation is divided by sqrt(0 + 1e-8) (zero-variance-groups).
    ref = reference_module("trinity.algorithm.advantage_fn.reinforce_plus_plus_advantage")
    batch = make_batch([Spec(0, 1 / 3, [True]), Spec(1, 1 / 3, [True] * 6)])
    proto = reference_proto(batch)
    ref.REINFORCEPLUSPLUSAdvantageFn()(proto)
    REINFORCEPLUSPLUSAdvantageFn()(batch)
    assert torch.equal(batch.advantages, torch.zeros_like(batch.advantages))
    assert float(proto.batch["advantages"].abs().max()) > 1e-5
