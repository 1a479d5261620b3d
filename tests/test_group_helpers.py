"""The shared helpers of group computations: reward_check, group_kernels and group_metrics."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.components import summarize_masked_metric
from trinity_core.components.group_kernels import group_ranks, mean_logprob, rank_corrected_rewards
from trinity_core.components.group_metrics import group_reward_metrics, metric_column
from trinity_core.components.reward_check import check_finite_rewards, finite_reward, finite_rewards
from trinity_core.experience import EID, Experience

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only


def _exp(reward: float | None, task: int = 0, run: int = 0) -> Experience:
    return Experience(
        eid=EID(batch=0, task=task, run=run),
        tokens=torch.tensor([1, 2, 3]),
        prompt_length=1,
        reward=reward,
    )


# ---------------------------------------------------------------------------------------- reward_check


def test_finite_rewards_reads_float64() -> None:
    exps = [_exp(1.0), _exp(0.25), _exp(-3)]
    rewards = finite_rewards(exps, "x")
    assert rewards.dtype == torch.float64
    assert rewards.tolist() == [1.0, 0.25, -3.0]
    assert finite_rewards([], "x").shape == (0,)


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -math.inf])
def test_a_missing_or_non_finite_reward_names_the_experience(bad: float | None) -> None:
    exps = [_exp(1.0), _exp(bad, run=1)]
    uid = exps[1].eid.uid
    for call in (
        lambda: finite_rewards(exps, "grpo advantage"),
        lambda: check_finite_rewards(exps, "grpo advantage"),
    ):
        with pytest.raises(
            ValueError, match=rf"^grpo advantage: experience {uid} has reward .*finite reward"
        ):
            call()


def test_finite_reward_states_role_and_requirement() -> None:
    with pytest.raises(ValueError, match=r"\(the last step of its run\) has reward None; the last step"):
        finite_reward(_exp(None), "w", role=" (the last step of its run)", requirement="the last step ...")
    assert finite_reward(_exp(2), "w") == 2.0


# ---------------------------------------------------------------------------------------- group_kernels


def _ranks_by_definition(values: list[float], index: list[int]) -> list[int]:
    return [
        sum(1 for j in range(len(values)) if index[j] == index[i] and (values[j], j) < (values[i], i))
        for i in range(len(values))
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.sampled_from([-1.0, 0.0, 0.5, 2.0, 3.0])), min_size=0, max_size=30
    )
)
def test_group_ranks_match_the_definition(pairs: list[tuple[int, float]]) -> None:
    index = [g for g, _ in pairs]
    values = [v for _, v in pairs]
    got = group_ranks(torch.tensor(values, dtype=torch.float64), torch.tensor(index, dtype=torch.int64), 5)
    assert got.dtype == torch.int64
    assert got.tolist() == _ranks_by_definition(values, index)


def test_group_kernels_run_on_meta() -> None:
    index = torch.zeros(6, dtype=torch.int64, device="meta")
    values = torch.empty(6, dtype=torch.float64, device="meta")
    assert group_ranks(values, index, 2).device.type == "meta"
    assert rank_corrected_rewards(values, index, 2, values, 0.5).device.type == "meta"


def test_rank_correction_and_masked_mean_logprob() -> None:
    logprobs = torch.tensor([[-1.0, -9.0], [-2.0, -2.0], [-0.5, -0.5]])
    mask = torch.tensor([[True, False], [True, True], [False, False]])
    means = mean_logprob(logprobs, mask)
    assert means.dtype == torch.float64
    assert means.tolist() == [-1.0, -2.0, 0.0]
    rewards = torch.ones(3, dtype=torch.float64)
    corrected = rank_corrected_rewards(rewards, torch.zeros(3, dtype=torch.int64), 1, means, 0.3)
    # ranks: -2.0 -> 0, -1.0 -> 1, 0.0 -> 2
    assert corrected.tolist() == [1.0 - 0.3 * 1 / 3, 1.0, 1.0 - 0.3 * 2 / 3]


# ---------------------------------------------------------------------------------------- group_metrics


def test_group_reward_metrics_is_the_masked_summary_of_mean_and_std() -> None:
    mean = torch.tensor([0.5, 9.0, 0.25], dtype=torch.float64)
    std = torch.tensor([0.1, 9.0, 0.3], dtype=torch.float64)
    valid = torch.tensor([True, False, True])
    got = group_reward_metrics(mean, std, valid, prefix="p", names=("m", "s"))
    want = summarize_masked_metric(mean, valid, "m", "p") | summarize_masked_metric(std, valid, "s", "p")
    assert list(got) == list(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    none = group_reward_metrics(mean, std, torch.zeros(3, dtype=torch.bool))
    assert set(none) == {
        f"group_advantages/reward_{a}/{b}" for a in ("mean", "std") for b in ("mean", "max", "min")
    }
    assert all(float(v) == 0.0 for v in none.values())


def test_metric_column() -> None:
    per_group = [{"a": torch.tensor(0.5, dtype=torch.float64), "b": True}, {"a": 2, "b": False}]
    assert metric_column(per_group, "a").tolist() == [0.5, 2.0]
    assert metric_column(per_group, "b", torch.bool).tolist() == [True, False]
