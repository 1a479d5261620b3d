"""Hand-derived values of every advantage function of the plugin and of its documented policies."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from reinforce_support import Spec, group_specs, make_batch, make_exps
from trinity_plugin_reinforce import (
    REINFORCEGroupAdvantage,
    REINFORCEPLUSPLUSAdvantageFn,
    REINFORCEPlusPlusBaselineAdvantageFn,
    REMAXAdvantageFn,
    RLOOAdvantageFn,
)

F64 = torch.float64
BOTH_PATHS = pytest.mark.parametrize("path", ["process_vectorized", "process_per_group"])


def first_scores(exps: list) -> list[float]:
    return [float(e.advantages[0]) for e in exps]


def test_default_args_and_placement() -> None:
    assert REINFORCEGroupAdvantage.default_args() == {}
    assert REINFORCEPLUSPLUSAdvantageFn.default_args() == {"gamma": 1.0}
    assert REINFORCEPlusPlusBaselineAdvantageFn.default_args() == {}
    assert REMAXAdvantageFn.default_args() == {}
    assert RLOOAdvantageFn.default_args() == {}
    assert REINFORCEGroupAdvantage.compute_in_trainer() is False
    for cls in (
        REINFORCEPLUSPLUSAdvantageFn,
        REINFORCEPlusPlusBaselineAdvantageFn,
        REMAXAdvantageFn,
        RLOOAdvantageFn,
    ):
        assert cls.compute_in_trainer() is True
    assert "reward_baselines" in REMAXAdvantageFn.required_fields


@pytest.mark.parametrize("bad", [{"gamma": 1.5}, {"gamma": -0.1}, {"lam": 1.0}])
def test_invalid_args_are_rejected(bad: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        REINFORCEPLUSPLUSAdvantageFn(**bad)


# ------------------------------------------------------------------------------ reinforce (pipeline)


@BOTH_PATHS
def test_reinforce_is_the_raw_reward(path: str) -> None:
    # Groups (1, 0, 2) and (0.5): A = r; reward_mean per group 1 and 0.5.
    exps = make_exps(group_specs([[1.0, 0.0, 2.0], [0.5]]))
    out, metrics = getattr(REINFORCEGroupAdvantage(), path)(exps)
    assert first_scores(out) == [1.0, 0.0, 2.0, 0.5]
    assert all(torch.equal(e.advantages, e.returns) for e in out)
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx(0.75)
    assert float(metrics["group_advantages/reward_mean/max"]) == 1.0
    assert float(metrics["group_advantages/reward_mean/min"]) == 0.5


@BOTH_PATHS
@pytest.mark.parametrize("reward", [None, math.nan, -math.inf])
def test_reinforce_rejects_missing_or_non_finite_rewards(path: str, reward: float | None) -> None:
    exps = make_exps(group_specs([[1.0, 0.0]]))
    exps[1].reward = reward
    with pytest.raises(ValueError, match="finite reward"):
        getattr(REINFORCEGroupAdvantage(), path)(exps)


# ------------------------------------------------------------------------------ reinforce++


def test_reinforceplusplus_discounts_and_whitens_over_the_batch() -> None:
    # γ = 0.5. Response 0: 3 tokens, reward 1 -> H = (0.25, 0.5, 1). Response 1: 2 tokens, reward 2 ->
    # H = (1, 2). Over the 5 tokens: μ = 0.95, Σ(H−μ)² = 1.8, unbiased var 0.45.
    batch = make_batch([Spec(0, 1.0, [True] * 3), Spec(1, 2.0, [True] * 2)])
    _, metrics = REINFORCEPLUSPLUSAdvantageFn(gamma=0.5)(batch)
    returns = torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    expected = torch.where(mask, (returns - 0.95) / math.sqrt(0.45 + 1e-8), 0.0)
    torch.testing.assert_close(batch.returns.double(), returns)
    torch.testing.assert_close(batch.advantages.double(), expected, rtol=1e-6, atol=1e-7)
    assert float(metrics["returns_mean"]) == pytest.approx(0.95)
    assert float(metrics["returns_std"]) == pytest.approx(math.sqrt(0.45))


def test_reinforceplusplus_discounts_per_action_token_across_holes() -> None:
    # Action mask (1, 0, 1, 1), reward 1 on the last token, γ = 0.5: two decisions separate token 0 from
    # token 3, so H_0 = γ² = 0.25 (the reference discounts through the hole: γ³). Token 1 (masked) is 0.
    batch = make_batch([Spec(0, 1.0, [True, False, True, True]), Spec(1, 0.0, [True] * 4)])
    REINFORCEPLUSPLUSAdvantageFn(gamma=0.5)(batch)
    torch.testing.assert_close(batch.returns[0].double(), torch.tensor([0.25, 0.0, 0.5, 1.0], dtype=F64))


def test_reinforceplusplus_reward_on_a_non_action_token_belongs_to_the_preceding_action() -> None:
    # Token rewards (0, 1, 0, 0) with token 1 an environment token: H_0 = 0 + 1 · (1 + γ · 0) = 1.
    spec = Spec(0, 0.0, [True, False, True, True], token_rewards=[0.0, 1.0, 0.0, 0.0])
    batch = make_batch([spec, Spec(1, 0.0, [True] * 4, token_rewards=[0.0] * 4)])
    REINFORCEPLUSPLUSAdvantageFn(gamma=0.5)(batch)
    torch.testing.assert_close(batch.returns[0].double(), torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))


# ------------------------------------------------------------------------------ rloo


def test_rloo_leave_one_out_singleton_and_zero_variance() -> None:
    # Group (1, 0, 2): other-means 1, 1.5, 0.5 -> A = 0, −1.5, 1.5. Singleton (3) -> 0. Group (0.7 × 3) -> 0.
    specs = group_specs([[1.0, 0.0, 2.0], [3.0], [0.7, 0.7, 0.7]], length=2)
    specs[0] = Spec(0, 1.0, [True, False])  # a hole: zero there
    batch = make_batch(specs)
    _, metrics = RLOOAdvantageFn()(batch)
    expected = torch.tensor([0.0, -1.5, 1.5, 0.0, 0.0, 0.0, 0.0], dtype=F64)[:, None].expand(7, 2).clone()
    expected[0, 1] = 0.0
    torch.testing.assert_close(batch.advantages.double(), expected)
    assert torch.equal(batch.advantages[4:], torch.zeros(3, 2))
    assert torch.equal(batch.advantages, batch.returns)
    assert int(metrics["singleton_count"]) == 1


def test_rloo_sums_token_level_rewards() -> None:
    # Scores 1 + 2 = 3 and 0 -> A = ±3.
    batch = make_batch(
        [
            Spec(0, 0.0, [True, True], token_rewards=[1.0, 2.0]),
            Spec(0, 0.0, [True, True], token_rewards=[0.0, 0.0]),
        ]
    )
    RLOOAdvantageFn()(batch)
    torch.testing.assert_close(batch.advantages[:, 0].double(), torch.tensor([3.0, -3.0], dtype=F64))


# ------------------------------------------------------------------------------ reinforce++-baseline


def test_reinforce_plus_plus_baseline_centres_then_whitens() -> None:
    # Group (1, 0) with 3 and 1 tokens, singleton (5) with 1 token. Centred c = 0.5, −0.5, 0 (the
    # singleton's own score is its baseline). Token values (.5, .5, .5, −.5, 0): μ = 0.2,
    # Σ(v − μ)² = 0.8, unbiased var 0.2 -> A = (c − 0.2)/sqrt(0.2 + 1e-8); the singleton gets −0.2/σ.
    batch = make_batch([Spec(0, 1.0, [True] * 3), Spec(0, 0.0, [True]), Spec(1, 5.0, [True])])
    _, metrics = REINFORCEPlusPlusBaselineAdvantageFn()(batch)
    sigma = math.sqrt(0.2 + 1e-8)
    expected = torch.tensor(
        [[0.3 / sigma] * 3, [-0.7 / sigma, 0.0, 0.0], [-0.2 / sigma, 0.0, 0.0]], dtype=F64
    )
    torch.testing.assert_close(batch.advantages.double(), expected, rtol=1e-6, atol=1e-7)
    assert int(metrics["singleton_count"]) == 1


def test_reinforce_plus_plus_baseline_zero_variance_groups_share_the_batch_shift() -> None:
    # Groups (2, 2) and (0, 1), 1 token each: c = 0, 0, −0.5, 0.5 -> μ = 0 -> flat group exactly 0.
    batch = make_batch(group_specs([[2.0, 2.0], [0.0, 1.0]], length=1))
    REINFORCEPlusPlusBaselineAdvantageFn()(batch)
    assert torch.equal(batch.advantages[:2], torch.zeros(2, 1))


# ------------------------------------------------------------------------------ remax


def test_remax_reward_to_go_minus_the_greedy_baseline() -> None:
    # Token rewards (0, 1, 2) -> H = (3, 3, 2); baseline 1.5 -> A = (1.5, 1.5, 0.5).
    batch = make_batch(
        [Spec(0, 0.0, [True] * 3, token_rewards=[0.0, 1.0, 2.0])],
        extras={"reward_baselines": torch.tensor([1.5])},
    )
    _, metrics = REMAXAdvantageFn()(batch)
    torch.testing.assert_close(batch.returns.double(), torch.tensor([[3.0, 3.0, 2.0]], dtype=F64))
    torch.testing.assert_close(batch.advantages.double(), torch.tensor([[1.5, 1.5, 0.5]], dtype=F64))
    assert float(metrics["reward_baseline_mean"]) == 1.5


def test_remax_accepts_column_baselines() -> None:
    batch = make_batch([Spec(0, 1.0, [True] * 2)], extras={"reward_baselines": torch.tensor([[0.25]])})
    REMAXAdvantageFn()(batch)
    torch.testing.assert_close(batch.advantages.double(), torch.tensor([[0.75, 0.75]], dtype=F64))


def test_remax_without_baselines_says_what_is_missing() -> None:
    batch = make_batch([Spec(0, 1.0, [True] * 2)])
    with pytest.raises(KeyError, match=r"reward_baselines.*greedy.*batch\.extras"):
        REMAXAdvantageFn()(batch)


def test_remax_with_misshapen_baselines_is_an_error() -> None:
    batch = make_batch([Spec(0, 1.0, [True] * 2)], extras={"reward_baselines": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"shape \(2,\); expected \(1,\)"):
        REMAXAdvantageFn()(batch)
