"""Hand-derived values of the grpo advantage, its options and its documented policies."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from grpo_support import make_group_exps, scores
from trinity_plugin_grpo import GRPOGroupedAdvantage

from trinity_core.experience import EID, Experience

EPS = 1e-6
BOTH_PATHS = pytest.mark.parametrize("path", ["process_vectorized", "process_per_group"])


def run(path: str, fn: GRPOGroupedAdvantage, exps: list[Experience]) -> tuple[list[Experience], dict]:
    out, metrics = getattr(fn, path)(exps)
    return out, metrics


def test_default_args_are_the_seed_defaults() -> None:
    assert GRPOGroupedAdvantage.default_args() == {
        "epsilon": 1e-6,
        "std_threshold": None,
        "duplicate_experiences": False,
        "rank_penalty": None,
        "std_cal_level": "group",
    }
    assert GRPOGroupedAdvantage.compute_in_trainer() is False


@pytest.mark.parametrize(
    "bad", [{"std_cal_level": "token"}, {"epsilon": -1.0}, {"rank_penalty": 1.5}, {"unknown": 1}]
)
def test_invalid_args_are_rejected(bad: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        GRPOGroupedAdvantage(**bad)


@BOTH_PATHS
def test_group_formula_singleton_and_zero_variance(path: str) -> None:
    # Group 0: rewards 1, 0, 1 -> mean 2/3, unbiased std sqrt(((1/3)² + (2/3)² + (1/3)²) / 2) = sqrt(1/3).
    # Group 1: seven rewards 0.7 -> zero variance -> exactly 0. Group 2: a singleton -> exactly 0.
    exps = make_group_exps([[1, 0, 1], [0.7] * 7, [3.0]])
    out, metrics = run(path, GRPOGroupedAdvantage(), exps)
    sigma = math.sqrt(1 / 3)
    expected = [(1 / 3) / (sigma + EPS), (-2 / 3) / (sigma + EPS), (1 / 3) / (sigma + EPS)] + [0.0] * 8
    assert len(out) == 11
    torch.testing.assert_close(scores(out), torch.tensor(expected, dtype=torch.float64), rtol=1e-6, atol=0)
    assert all(float(v) == 0.0 for e in out[3:] for v in e.advantages)
    for e in out:  # advantages broadcast over the response, returns equal advantages
        assert torch.equal(e.advantages, e.returns)
        assert e.advantages.shape == (3,)
    # Statistics exclude the singleton: mean of (2/3, 0.7), std of (sqrt(1/3), 0).
    torch.testing.assert_close(
        metrics["group_advantages/reward_mean/mean"].double(),
        torch.tensor((2 / 3 + 0.7) / 2, dtype=torch.float64),
    )
    assert float(metrics["group_advantages/reward_std/min"]) == 0.0
    torch.testing.assert_close(
        metrics["group_advantages/reward_std/max"].double(), torch.tensor(sigma, dtype=torch.float64)
    )
    assert int(metrics["group_advantages/singleton_count"]) == 1
    assert int(metrics["filtered_count"]) == 0


@BOTH_PATHS
def test_action_mask_zeroes_non_action_tokens(path: str) -> None:
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
    out, _ = run(path, GRPOGroupedAdvantage(), exps)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(out[1].advantages, torch.tensor([a, 0.0, a]))
    torch.testing.assert_close(out[0].advantages, torch.tensor([-a, 0.0, -a]))


@BOTH_PATHS
def test_batch_std_level(path: str) -> None:
    # Groups (0, 1) and (2, 4): group means 0.5 and 3; batch values 0, 1, 2, 4: mean 1.75,
    # squared deviations 3.0625 + 0.5625 + 0.0625 + 5.0625 = 8.75, unbiased var 8.75 / 3.
    # The singleton (10) takes part in no statistic.
    exps = make_group_exps([[0, 1], [2, 4], [10]])
    out, metrics = run(path, GRPOGroupedAdvantage(std_cal_level="batch"), exps)
    sigma = math.sqrt(8.75 / 3)
    expected = [-0.5, 0.5, -1.0, 1.0, 0.0]
    torch.testing.assert_close(
        scores(out), torch.tensor(expected, dtype=torch.float64) / (sigma + EPS), rtol=1e-6, atol=0
    )
    torch.testing.assert_close(
        metrics["group_advantages/batch_reward_std"].double(), torch.tensor(sigma, dtype=torch.float64)
    )


@BOTH_PATHS
def test_rank_penalty_uses_corrected_reward_everywhere(path: str) -> None:
    # Rewards 0..3 with mean log-probs 0.1·i -> ranks 0..3, n = 4, p = 0.2:
    # r' = r · (1 − 0.2·k/4) = [0, 0.95, 1.80, 2.55] (the correct_bias example of earlier releases).
    exps = make_group_exps([[0, 1, 2, 3]], logprob_means=[[0.0, 0.1, 0.2, 0.3]])
    out, metrics = run(path, GRPOGroupedAdvantage(rank_penalty=0.2), exps)
    corrected = torch.tensor([0.0, 0.95, 1.80, 2.55], dtype=torch.float64)
    mean = corrected.mean()
    std = corrected.std()
    torch.testing.assert_close(scores(out), (corrected - mean) / (std + EPS), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(metrics["group_advantages/reward_mean/mean"].double(), mean)


@BOTH_PATHS
def test_rank_penalty_ranks_the_masked_mean_logprob_and_breaks_ties_by_order(path: str) -> None:
    # Experience 0 has a very low log-prob on a masked-out token: masked mean -0.1 (unmasked it would
    # be ≈ -33). Experiences 1 and 2 tie at -0.5: batch order decides (1 before 2).
    masks = [[True, False, True], [True, True, True], [True, True, True]]
    lps = [[-0.1, -100.0, -0.1], [-0.5] * 3, [-0.5] * 3]
    exps = [
        Experience(
            eid=EID(task=0, run=i),
            tokens=[1, 2, 3, 4, 5],
            prompt_length=2,
            reward=1.0,
            logprobs=lps[i],
            action_mask=masks[i],
        )
        for i in range(3)
    ]
    out, _ = run(path, GRPOGroupedAdvantage(rank_penalty=0.3), exps)
    # ranks: exp1 -> 0, exp2 -> 1, exp0 -> 2; r' = 1 - 0.3·k/3
    corrected = torch.tensor([1 - 0.3 * 2 / 3, 1.0, 1 - 0.3 / 3], dtype=torch.float64)
    expected = (corrected - corrected.mean()) / (corrected.std() + EPS)
    torch.testing.assert_close(scores(out), expected, rtol=1e-6, atol=1e-7)


@BOTH_PATHS
def test_std_threshold_drops_flat_groups_and_singletons(path: str) -> None:
    exps = make_group_exps([[1, 1, 1], [0, 1], [5]])
    out, metrics = run(path, GRPOGroupedAdvantage(std_threshold=0.0), exps)
    assert [e.eid.task for e in out] == [1, 1]
    assert int(metrics["filtered_count"]) == 4
    assert "duplicated_count" not in metrics


@BOTH_PATHS
def test_polaris_duplication_restores_the_experience_count(path: str) -> None:
    # 6 experiences, the 2 of task 1 survive: D = 4 missing, K = 2 -> each survivor copied twice,
    # copies right after their source, same task, suffix "<suffix>-dup<c>".
    exps = make_group_exps([[1, 1, 1], [0, 1], [5]])
    fn = GRPOGroupedAdvantage(std_threshold=0.0, duplicate_experiences=True)
    out, metrics = run(path, fn, exps)
    a, b = exps[3], exps[4]
    assert len(out) == len(exps) == 6
    assert out[0] is a
    assert out[3] is b
    assert [e.eid.suffix for e in out] == [
        a.eid.suffix,
        f"{a.eid.suffix}-dup1",
        f"{a.eid.suffix}-dup2",
        b.eid.suffix,
        f"{b.eid.suffix}-dup1",
        f"{b.eid.suffix}-dup2",
    ]
    assert {e.eid.tid for e in out} == {a.eid.tid}
    assert len({e.eid.uid for e in out}) == 6
    assert int(metrics["duplicated_count"]) == 4
    for copy_, src in ((out[1], a), (out[2], a), (out[4], b), (out[5], b)):
        assert torch.equal(copy_.advantages, src.advantages)
        assert copy_.advantages.data_ptr() != src.advantages.data_ptr()
        assert copy_.reward == src.reward


def test_duplication_spreads_uneven_remainders_evenly() -> None:
    from trinity_plugin_grpo.duplicate import copy_counts

    assert copy_counts(4, 6) == [0, 1, 0, 1]
    assert copy_counts(3, 10) == [2, 2, 3]
    assert copy_counts(0, 5) == []
    assert copy_counts(5, 5) == [0] * 5
    for kept, target in ((3, 7), (7, 8), (2, 9)):
        counts = copy_counts(kept, target)
        assert sum(counts) + kept == target
        assert max(counts) - min(counts) <= 1


@BOTH_PATHS
def test_everything_filtered_gives_empty_output(path: str) -> None:
    exps = make_group_exps([[1, 1], [2]])
    out, metrics = run(path, GRPOGroupedAdvantage(std_threshold=0.0, duplicate_experiences=True), exps)
    assert out == []
    assert int(metrics["filtered_count"]) == 3
    assert float(metrics["group_advantages/reward_std/max"]) == 0.0


@BOTH_PATHS
@pytest.mark.parametrize("reward", [None, math.nan, math.inf])
def test_missing_or_non_finite_rewards_are_rejected(path: str, reward: float | None) -> None:
    exps = make_group_exps([[1, 0]])
    exps[1].reward = reward
    with pytest.raises(ValueError, match=r"finite reward"):
        run(path, GRPOGroupedAdvantage(), exps)


@BOTH_PATHS
def test_rank_penalty_without_logprobs_is_an_error(path: str) -> None:
    exps = make_group_exps([[1, 0]])
    for e in exps:
        e.logprobs = None
    with pytest.raises(ValueError, match="rank_penalty needs logprobs"):
        run(path, GRPOGroupedAdvantage(rank_penalty=0.1), exps)


def test_call_and_empty_input() -> None:
    fn = GRPOGroupedAdvantage()
    assert fn([]) == ([], {})
    exps = make_group_exps([[0, 1]])
    out, _ = fn(exps)
    assert out == exps


@BOTH_PATHS
def test_group_statistics_are_float64_for_rewards_far_from_zero(path: str) -> None:
    # Rewards a million from zero, each exact in float32. Their sum, 4,000,003.75, is not: float32 rounds
    # it to 4,000,004 (an error of 1/16 in the mean, a tenth of the std). In float64 the mean is
    # 1,000,000.9375 and the unbiased std sqrt(sum of squared deviations / 3).
    rewards = [1e6 + 0.25, 1e6 + 0.5, 1e6 + 1.0, 1e6 + 2.0]
    out, _ = run(path, GRPOGroupedAdvantage(), make_group_exps([rewards]))
    mean = sum(rewards) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 3)
    expected = torch.tensor([(r - mean) / (std + EPS) for r in rewards], dtype=torch.float64)
    torch.testing.assert_close(scores(out), expected, rtol=1e-6, atol=1e-6)
