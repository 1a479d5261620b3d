"""Hand-derived values of the ``opmd`` and ``asymre`` advantages and their documented policies."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from opmd_support import make_group_exps, scores
from trinity_plugin_opmd import ASYMREGroupAdvantage, OPMDGroupAdvantage

from trinity_core.experience import EID, Experience

F64 = torch.float64
BOTH_PATHS = pytest.mark.parametrize("path", ["process_vectorized", "process_per_group"])


def run(fn: object, path: str, exps: list[Experience]) -> tuple[list[Experience], dict]:
    return getattr(fn, path)(exps)  # type: ignore[no-any-return]


def test_default_args_are_the_seed_defaults() -> None:
    assert OPMDGroupAdvantage.default_args() == {"opmd_baseline": "mean", "tau": 1.0}
    assert ASYMREGroupAdvantage.default_args() == {"baseline_shift": -0.1}
    assert OPMDGroupAdvantage.compute_in_trainer() is False
    assert ASYMREGroupAdvantage.compute_in_trainer() is False


@pytest.mark.parametrize("bad", [{"opmd_baseline": "max"}, {"tau": 0.0}, {"tau": -1.0}, {"epsilon": 1e-6}])
def test_opmd_rejects_invalid_args(bad: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        OPMDGroupAdvantage(**bad)


@BOTH_PATHS
def test_opmd_mean_baseline_singleton_and_zero_variance(path: str) -> None:
    # Group (1, 0, 2): mean 1 -> A = 0, −1, 1. Singleton (3): its own baseline -> 0. (0.7 × 7): exactly 0.
    out, metrics = run(OPMDGroupAdvantage(), path, make_group_exps([[1.0, 0.0, 2.0], [3.0], [0.7] * 7]))
    expected = torch.tensor([0.0, -1.0, 1.0] + [0.0] * 8, dtype=F64)
    torch.testing.assert_close(scores(out), expected)
    assert all(float(v) == 0.0 for e in out[3:] for v in e.advantages)
    assert all(torch.equal(e.advantages, e.returns) for e in out)
    # Groups' means 1, 3, 0.7 (baselines equal them): mean 4.7 / 3.
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx(4.7 / 3)
    assert float(metrics["group_advantages/group_baseline/max"]) == pytest.approx(3.0)
    assert float(metrics["group_advantages/singleton_count/sum"]) == 1.0


@BOTH_PATHS
@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_opmd_logavgexp_baseline(path: str, tau: float) -> None:
    # Rewards (0, 1): b = τ·log((e^0 + e^{1/τ}) / 2).
    out, metrics = run(
        OPMDGroupAdvantage(opmd_baseline="logavgexp", tau=tau), path, make_group_exps([[0.0, 1.0]])
    )
    b = tau * math.log((1 + math.exp(1 / tau)) / 2)
    torch.testing.assert_close(scores(out), torch.tensor([-b, 1 - b], dtype=F64), rtol=1e-6, atol=1e-7)
    assert float(metrics["group_advantages/group_baseline/mean"]) == pytest.approx(b)
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx(0.5)


@BOTH_PATHS
def test_opmd_logavgexp_never_overflows_and_is_exact_on_flat_groups(path: str) -> None:
    # Rewards (1000, 1000.5), τ = 0.01: exp(r/τ) overflows float64; shifted by the max it is
    # b = 1000.5 + 0.01·log((e^{−50} + 1)/2). The flat group (1000 × 3) and the singleton get exactly 0.
    fn = OPMDGroupAdvantage(opmd_baseline="logavgexp", tau=0.01)
    out, _ = run(fn, path, make_group_exps([[1000.0, 1000.5], [1000.0] * 3, [-7.0]]))
    b = 1000.5 + 0.01 * math.log((math.exp(-50) + 1) / 2)
    torch.testing.assert_close(scores(out)[:2], torch.tensor([1000.0 - b, 1000.5 - b], dtype=F64))
    assert torch.equal(scores(out)[2:], torch.zeros(4, dtype=F64))


@BOTH_PATHS
def test_opmd_respects_the_action_mask(path: str) -> None:
    exps = [
        Experience(
            eid=EID(task=0, run=i),
            tokens=[1, 2, 3, 4, 5],
            prompt_length=2,
            reward=float(i),
            action_mask=[True, False, True],
        )
        for i in range(2)
    ]
    out, _ = run(OPMDGroupAdvantage(), path, exps)
    torch.testing.assert_close(out[1].advantages, torch.tensor([0.5, 0.0, 0.5]))


@BOTH_PATHS
def test_asymre_shifted_mean_baseline(path: str) -> None:
    # Group (1, 0): mean 0.5, b = 0.4 -> A = 0.6, −0.4. Flat (2, 2) and the singleton (5): A = −δ = 0.1.
    out, metrics = run(ASYMREGroupAdvantage(), path, make_group_exps([[1.0, 0.0], [2.0, 2.0], [5.0]]))
    torch.testing.assert_close(
        scores(out), torch.tensor([0.6, -0.4, 0.1, 0.1, 0.1], dtype=F64), rtol=1e-6, atol=1e-7
    )
    # Exactly −δ (stored as float32): the deviation from the mean is computed first and is exactly 0.
    assert all(torch.equal(e.advantages, torch.full((3,), 0.1)) for e in out[2:])
    assert float(metrics["group_advantages/reward_mean/min"]) == pytest.approx(0.5)
    assert float(metrics["group_advantages/reward_mean/max"]) == pytest.approx(5.0)
    assert float(metrics["group_advantages/group_baseline/min"]) == pytest.approx(0.4)


@BOTH_PATHS
@pytest.mark.parametrize("fn", [OPMDGroupAdvantage(), ASYMREGroupAdvantage()], ids=["opmd", "asymre"])
@pytest.mark.parametrize("reward", [None, math.nan, math.inf])
def test_missing_or_non_finite_rewards_are_rejected(path: str, fn: object, reward: float | None) -> None:
    exps = make_group_exps([[1.0, 0.0]])
    exps[0].reward = reward
    with pytest.raises(ValueError, match="finite reward"):
        run(fn, path, exps)
