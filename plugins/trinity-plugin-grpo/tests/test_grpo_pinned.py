"""Behaviour pinned where a mutation audit found the tests silent: the baselines' group statistics and
dtypes, the per-group API of the pipeline-side baselines, errors that name the component on every path,
the rank penalty's masked mean log-prob, the zero-variance boundary, the batch std's divisor, and which
path ``process`` takes. Golden values are derived by hand from the documented formulas."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
import torch
from grpo_family_support import first_scores, make_exps
from grpo_support import make_group_exps
from trinity_plugin_grpo import DrGRPOAdvantage, GPGAdvantage, OPOAdvantage
from trinity_plugin_grpo.advantage import GRPOGroupedAdvantage, _masked_mean_logprob
from trinity_plugin_grpo.baselines import centred_scores, length_weighted_scores, passk_scores
from trinity_plugin_grpo.group_score import group_score_metrics, response_token_counts

from trinity_core.batch import ExperienceBatch
from trinity_core.components import GroupAdvantage
from trinity_core.experience import EID, Experience

BASELINES = [DrGRPOAdvantage, OPOAdvantage, GPGAdvantage]


def _index(*sizes: int) -> tuple[torch.Tensor, int]:
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)), len(sizes)


def _nan_message(fn: GroupAdvantage) -> str:
    return f"^{type(fn).name()} advantage: experience \\S+ has reward nan"


def _every_path(fn: GroupAdvantage) -> tuple[Callable[[list[Experience]], object], ...]:
    """The four ways a group advantage is computed: one group, per group, the list path, a batch."""
    return (
        lambda e: fn.calculate_group_advantage("0", e),  # type: ignore[attr-defined]
        fn.process_per_group,
        fn.process_vectorized,
        lambda e: fn.process_batch(ExperienceBatch.from_experiences(e)),
    )


# ---------------------------------------------------------------------------------------------- kernels


def test_baselines_take_float32_rewards_and_compute_in_float64() -> None:
    r64 = torch.tensor([1.0, 0.1, 0.3, 7.0], dtype=torch.float64)
    r32 = r64.to(torch.float32)
    index, groups = _index(3, 1)
    lengths = torch.tensor([1, 2, 3, 4])
    for scores in (
        lambda r: centred_scores(r, index, groups),
        lambda r: length_weighted_scores(r, lengths, index, groups),
        lambda r: passk_scores(r, index, groups, epsilon=1e-6, normalize=True),
    ):
        from32, from64 = scores(r32), scores(r32.to(torch.float64))
        assert from32.advantages.dtype == torch.float64
        assert torch.equal(from32.advantages, from64.advantages)
        assert torch.equal(from32.group_mean, from64.group_mean)
        assert not torch.equal(from64.advantages, scores(r64).advantages)  # the float32 values differ


def test_baselines_report_a_group_mean_of_0_for_singletons() -> None:
    r = torch.tensor([1.0, 0.0, 5.0], dtype=torch.float64)
    index, groups = _index(2, 1)
    for s in (
        centred_scores(r, index, groups),
        length_weighted_scores(r, torch.tensor([2, 3, 4]), index, groups),
        passk_scores(r, index, groups, epsilon=1e-6, normalize=True),
    ):
        assert s.group_mean.tolist() == [0.5, 0.0]
        assert s.group_valid.tolist() == [True, False]
        assert s.advantages[2] == 0.0


def test_opo_equal_negative_rewards_give_exactly_0() -> None:
    # Summing three -0.1 and dividing by 3 is not -0.1 in float64: the baseline is taken relative to the
    # group's largest reward so that the deviations, and the advantages, are exactly 0.
    assert (-0.1 - 0.1 - 0.1) / 3 != -0.1
    r = torch.full((3,), -0.1, dtype=torch.float64)
    index, groups = _index(3)
    out = length_weighted_scores(r, torch.tensor([1, 1, 1]), index, groups)
    assert out.advantages.tolist() == [0.0, 0.0, 0.0]


def test_opo_a_group_with_one_action_token_in_all_weighs_by_it() -> None:
    # r = 1, 0 with 1 and 0 tokens: b = (1·1 + 0·0) / 1 = 1, so A = (0, −1) (not the plain mean 0.5).
    index, groups = _index(2)
    out = length_weighted_scores(torch.tensor([1.0, 0.0]), torch.tensor([1, 0]), index, groups)
    assert out.advantages.tolist() == [0.0, -1.0]


def test_response_token_counts_without_action_masks_are_response_lengths() -> None:
    exps = make_exps([[1.0, 0.0]], lengths=[[3, 5]])
    exps[1].action_mask = torch.tensor([True, False, True, False, False])
    assert response_token_counts(exps).tolist() == [3, 2]
    for e in exps:
        e.action_mask = None
    counts = response_token_counts(exps)
    assert counts.tolist() == [3, 5]
    assert counts.dtype == torch.int64
    empty = response_token_counts([])
    assert empty.shape == (0,)
    assert empty.dtype == torch.int64


def test_response_token_counts_of_an_experience_without_a_response_is_0() -> None:
    exp = Experience(eid=EID(task=0), tokens=[1, 2], prompt_length=2, action_mask=[], reward=1.0)
    exp.action_mask = None
    assert exp.response_length == 0
    assert response_token_counts([exp]).tolist() == [0]


def test_group_score_metrics_report_context_entries_in_float64() -> None:
    metrics = group_score_metrics(
        torch.tensor([0.5], dtype=torch.float64),
        torch.tensor([True]),
        torch.tensor(0),
        {"alpha": torch.tensor(1.5, dtype=torch.float32)},
    )
    assert metrics["group_advantages/alpha"].dtype == torch.float64
    assert float(metrics["group_advantages/alpha"]) == 1.5


# ---------------------------------------------------------------- per-group API of the group baselines


def test_calculate_group_advantage_of_a_group_baseline() -> None:
    fn = DrGRPOAdvantage()
    exps = make_exps([[1.0, 0.0]])
    out, metrics = fn.calculate_group_advantage("0", exps)
    assert out is exps
    assert first_scores(out).tolist() == [0.5, -0.5]
    assert metrics == {"singleton_count": 0, "reward_mean": 0.5}
    out, metrics = fn.calculate_group_advantage("1", make_exps([[3.0]]))
    assert first_scores(out).tolist() == [0.0]
    assert metrics == {"singleton_count": 1}


def test_calculate_group_advantage_takes_the_batch_context_or_the_groups_own() -> None:
    fn = GPGAdvantage()
    # Alone, the group is the whole call: alpha = 4 / 2 non-zero rewards = 2, so A = 2 (r − 0.5).
    out, metrics = fn.calculate_group_advantage("0", make_exps([[1.0, 0.0, 0.0, 1.0]]))
    assert first_scores(out).tolist() == [1.0, -1.0, -1.0, 1.0]
    assert metrics == {"singleton_count": 0, "reward_mean": 0.5}
    context = {"alpha": torch.tensor(3.0, dtype=torch.float64)}
    out, _ = fn.calculate_group_advantage("0", make_exps([[1.0, 0.0, 0.0, 1.0]]), context=context)
    assert first_scores(out).tolist() == [1.5, -1.5, -1.5, 1.5]


@pytest.mark.parametrize("cls", BASELINES)
def test_group_baselines_name_themselves_for_a_nan_reward_on_every_path(cls: type) -> None:
    fn = cls()
    for call in _every_path(fn):
        with pytest.raises(ValueError, match=_nan_message(fn)):
            call(make_exps([[1.0, math.nan, 0.0]]))


@pytest.mark.parametrize("cls", [DrGRPOAdvantage, OPOAdvantage])
def test_group_baselines_batch_without_action_masks_use_the_response_mask(cls: type) -> None:
    fn = cls()
    exps = make_exps([[1.0, 0.0, 2.0]], lengths=[[1, 3, 4]])
    want, _ = fn.process_batch(ExperienceBatch.from_experiences(exps))
    for e in exps:
        e.action_mask = None
    batch = ExperienceBatch.from_experiences(exps)
    assert batch.action_mask is None
    got, _ = fn.process_batch(batch)
    assert torch.equal(got, want)


class TokenTotal(DrGRPOAdvantage):
    """Dr. GRPO that reports the call's action tokens: a batch context read from the lengths."""

    def batch_context(self, rewards: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"tokens": lengths.sum().to(torch.float64)}


def test_batch_context_gets_the_action_token_counts_on_every_path() -> None:
    fn = TokenTotal()
    masks = [[[True, False, True], [True, True, True]], [[False, False, True]]]
    exps = make_exps([[1.0, 0.0], [2.0]], masks=masks)
    _, metrics = fn.process_per_group(exps)
    assert float(metrics["group_advantages/tokens"]) == 6.0
    _, metrics = fn.process_batch(ExperienceBatch.from_experiences(exps))
    assert float(metrics["group_advantages/tokens"]) == 6.0
    _, context = fn.score_group(exps[:2])
    assert float(context["tokens"]) == 5.0


# ------------------------------------------------------------------------------------------------ grpo


def _multi_turn(logprobs: list[float], mask: list[bool], reward: float = 1.0, run: int = 0) -> Experience:
    return Experience(
        eid=EID(task=0, run=run),
        tokens=list(range(1 + len(logprobs))),
        prompt_length=1,
        action_mask=mask,
        logprobs=logprobs,
        reward=reward,
    )


def test_masked_mean_logprob_by_hand() -> None:
    assert _masked_mean_logprob(_multi_turn([-1.0, -2.0, -4.0], [True, False, True]), "w") == -2.5
    assert _masked_mean_logprob(_multi_turn([-3.0, -5.0], [False, True]), "w") == -5.0
    assert _masked_mean_logprob(_multi_turn([-3.0, -5.0], [False, False]), "w") == 0.0
    unmasked = _multi_turn([-1.0, -3.0], [True, True])
    unmasked.action_mask = None
    assert _masked_mean_logprob(unmasked, "w") == -2.0
    # float32 log-probs are averaged in float64: -1 + 2^-30 is not a float32 value.
    fine = _multi_turn([-1.0, 2.0**-30], [True, True])
    assert fine.logprobs.dtype == torch.float32
    assert _masked_mean_logprob(fine, "w") == (-1.0 + 2.0**-30) / 2


def test_rank_penalty_without_logprobs_names_the_component_and_what_to_do() -> None:
    fn = GRPOGroupedAdvantage(rank_penalty=0.5)
    exps = make_exps([[1.0, 0.0]])
    want = (
        f"{type(fn).name()} advantage: rank_penalty needs logprobs but experience {exps[0].eid.uid} has "
        "none; record the sampling log-probs in the rollout or unset rank_penalty"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        fn.process_per_group(exps)
    want = (
        f"{type(fn).name()} advantage: rank_penalty needs logprobs but the batch has none; record the "
        "sampling log-probs in the rollout or unset rank_penalty"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        fn.process_batch(ExperienceBatch.from_experiences(exps))


@pytest.mark.parametrize("options", [{}, {"rank_penalty": 0.5}, {"std_cal_level": "batch"}])
def test_grpo_names_itself_for_a_nan_reward_on_every_path(options: dict) -> None:
    fn = GRPOGroupedAdvantage(**options)
    for groups in ([[math.nan]], [[1.0, math.nan, 0.0]]):
        for call in _every_path(fn):
            with pytest.raises(ValueError, match=_nan_message(fn)):
                call(make_group_exps(groups, logprob_means=[[-1.0] * len(groups[0])]))


def _both_paths(fn: GRPOGroupedAdvantage, groups: list[list[float]]) -> list[list[float]]:
    out = []
    for path in ("process_per_group", "process_vectorized"):
        kept, _ = getattr(fn, path)(make_group_exps(groups))
        out.append(first_scores(kept).tolist())
    return out


def test_grpo_equal_rewards_of_zero_give_0_even_without_epsilon() -> None:
    # σ = 0 = 1e-12 · max|r|: the zero-variance policy applies (not 0 / (0 + 0)).
    assert _both_paths(GRPOGroupedAdvantage(epsilon=0.0), [[0.0, 0.0, 0.0]]) == [[0.0] * 3] * 2


def test_grpo_zero_variance_threshold_is_relative_to_the_largest_reward() -> None:
    # r = 1e-9, 2e-9: σ = 1e-9/√2 is far above 1e-12 · 2e-9, so the group is scored: ±1/√2 with ε = 0.
    for scores in _both_paths(GRPOGroupedAdvantage(epsilon=0.0), [[1e-9, 2e-9]]):
        assert scores == pytest.approx([-(0.5**0.5), 0.5**0.5], rel=1e-6)


def test_grpo_uses_precomputed_std_only_at_batch_level() -> None:
    exps = make_group_exps([[1.0, 0.0]])
    GRPOGroupedAdvantage(epsilon=0.0).calculate_group_advantage("0", exps, precomputed_std=5.0)
    assert first_scores(exps).tolist() == pytest.approx([0.5**0.5, -(0.5**0.5)], rel=1e-6)
    fn = GRPOGroupedAdvantage(epsilon=0.0, std_cal_level="batch")
    fn.calculate_group_advantage("0", exps, precomputed_std=5.0)
    assert first_scores(exps).tolist() == pytest.approx([0.1, -0.1], rel=1e-6)


def _float32_of(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float32))


def test_grpo_precomputed_std_given_as_a_float_is_used_in_float64() -> None:
    # A σ for which 0.5 / (σ + ε) stored as float32 differs when σ itself is first rounded to float32.
    def flips(s: float) -> bool:
        in_float32 = float(torch.tensor(s, dtype=torch.float32) + 1e-6)  # σ + ε in float32, as torch adds
        return _float32_of(0.5 / (s + 1e-6)) != _float32_of(0.5 / in_float32)

    sigma = next(s for s in (0.05 + k * 1e-6 for k in range(100_000)) if flips(s))
    exps = make_group_exps([[1.0, 0.0]])
    GRPOGroupedAdvantage(std_cal_level="batch").calculate_group_advantage("0", exps, precomputed_std=sigma)
    assert float(exps[0].advantages[0]) == _float32_of(0.5 / (sigma + 1e-6))


def test_grpo_batch_std_of_singletons_only_is_0() -> None:
    fn = GRPOGroupedAdvantage(std_cal_level="batch")
    for path in ("process_per_group", "process_vectorized"):
        kept, metrics = getattr(fn, path)(make_group_exps([[1.0], [2.0]]))
        assert first_scores(kept).tolist() == [0.0, 0.0]
        assert float(metrics["group_advantages/batch_reward_std"]) == 0.0
        for name in ("reward_mean/mean", "reward_std/mean"):
            assert metrics[f"group_advantages/{name}"].dtype == torch.float64


def test_grpo_batch_fields_are_read_only_for_the_rank_penalty() -> None:
    assert GRPOGroupedAdvantage().batch_fields() == ()
    assert GRPOGroupedAdvantage(rank_penalty=0.1).batch_fields() == ("logprobs", "action_mask")


def test_grpo_rank_penalty_on_a_batch_without_action_masks_reads_every_response_token() -> None:
    fn = GRPOGroupedAdvantage(rank_penalty=0.5)
    exps = make_group_exps([[1.0, 1.0, 0.0]], logprob_means=[[-1.0, -3.0, -2.0]])
    want, _, _ = fn.process_batch(ExperienceBatch.from_experiences(exps))
    for e in exps:
        e.action_mask = None
    got, _, _ = fn.process_batch(ExperienceBatch.from_experiences(exps))
    assert torch.equal(got, want)


def test_grpo_columnar_equivalent_only_without_duplication_and_own_overrides() -> None:
    assert GRPOGroupedAdvantage().columnar_equivalent()
    assert GRPOGroupedAdvantage(std_threshold=0.1).columnar_equivalent()
    assert GRPOGroupedAdvantage(duplicate_experiences=True).columnar_equivalent()  # no effect alone
    assert not GRPOGroupedAdvantage(std_threshold=0.1, duplicate_experiences=True).columnar_equivalent()

    def same(self: GroupAdvantage, *args: object) -> object:
        return getattr(super(type(self), self), name)(*args)

    for name in ("process", "process_vectorized", "process_batch"):
        sub = type("Sub", (GRPOGroupedAdvantage,), {name: same})
        assert not sub().columnar_equivalent(), name


def test_grpo_process_builds_a_batch_only_where_it_must(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    batch_path = GroupAdvantage.process_vectorized

    def spy(self: GroupAdvantage, exps: list[Experience]) -> object:
        built.append(len(exps))
        return batch_path(self, exps)

    monkeypatch.setattr(GroupAdvantage, "process_vectorized", spy)
    groups = [[1.0, 0.0, 1.0], [0.5, 0.5]]
    for options in ({}, {"std_threshold": 0.1}, {"std_cal_level": "batch"}):
        GRPOGroupedAdvantage(**options).process_vectorized(make_group_exps(groups))
    assert built == []
    GRPOGroupedAdvantage(rank_penalty=0.5).process_vectorized(make_group_exps(groups, [[-1.0] * 3] * 2))
    assert built == [5]

    class OwnBatch(GRPOGroupedAdvantage):
        def process_batch(self, batch: ExperienceBatch) -> tuple[torch.Tensor, dict, torch.Tensor]:  # type: ignore[override]
            return super().process_batch(batch)

    OwnBatch().process_vectorized(make_group_exps(groups))
    assert built == [5, 5]


def test_grpo_refuses_dpo_pairs_as_the_batch_does() -> None:
    pair = Experience(eid=EID(task=0), tokens=[1, 2], chosen=[3], rejected=[4], reward=1.0)
    assert pair.experience_type == "dpo"
    refusal = "is a DPO pair; split it with split_dpo_experience_to_single_turn first"
    with pytest.raises(ValueError, match=refusal):
        ExperienceBatch.from_experiences([pair])
    with pytest.raises(ValueError, match=refusal):
        GRPOGroupedAdvantage().process_vectorized([pair])


class RunGroups(GRPOGroupedAdvantage):
    """GRPO grouped by run instead of task."""

    group_level = "run"


def _episodes(rewards: list[list[float]]) -> list[Experience]:
    """Task 0, run ``i`` with one step per reward of ``rewards[i]``."""
    return [
        Experience(eid=EID(task=0, run=run, step=step), tokens=[1, 2, 3], prompt_length=2, reward=r)
        for run, steps in enumerate(rewards)
        for step, r in enumerate(steps)
    ]


def test_grpo_groups_at_its_own_group_level_on_the_list_path() -> None:
    # Grouped by run: run 0 holds rewards 1, 0 and run 1 holds 0, 2, so A = ±1/√2 within each run (by
    # task, the four would form one group).
    per_group, _ = RunGroups(epsilon=0.0).process_per_group(_episodes([[1.0, 0.0], [0.0, 2.0]]))
    listed, _ = RunGroups(epsilon=0.0).process_vectorized(_episodes([[1.0, 0.0], [0.0, 2.0]]))
    a = 0.5**0.5
    for out in (per_group, listed):
        assert first_scores(out).tolist() == pytest.approx([a, -a, -a, a], rel=1e-6)
