"""grpo_verl (trainer-side GRPO): hand-derived values, policies, no host sync, and agreement with the
reference trinity-rft 0.6.0 ``GRPOAdvantageFn`` where it is right and the documented
differences where it is not (docs/reference-differences.md: singleton-groups, zero-variance-groups)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pydantic
import pytest
import torch
from grpo_family_support import make_exps, numpy_grpo
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_grpo import GRPOVerlAdvantage

from trinity_core.batch import ExperienceBatch
from trinity_core.experience import EID, Experience
from trinity_core.testing import count_host_syncs
from trinity_core.testing.reference import import_reference

EPS = 1e-6


def per_sequence(batch: ExperienceBatch) -> np.ndarray:
    """The advantage of each sequence at its first action token (float64)."""
    mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
    first = mask.to(torch.int64).argmax(dim=-1)
    return batch.advantages[torch.arange(len(batch)), first].double().numpy()


def test_args_and_placement() -> None:
    assert GRPOVerlAdvantage.default_args() == {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True}
    assert GRPOVerlAdvantage.compute_in_trainer() is True
    with pytest.raises(pydantic.ValidationError):
        GRPOVerlAdvantage(epsilon=-1.0)


def test_golden_values_singleton_and_zero_variance() -> None:
    # Group 0: 1, 0, 1 -> mean 2/3, unbiased std sqrt(1/3). Group 1: three 0.7 -> 0. Group 2: singleton -> 0.
    exps = make_exps([[1, 0, 1], [0.7] * 3, [3.0]], lengths=[[3, 2, 4], [3] * 3, [3]])
    batch, metrics = GRPOVerlAdvantage()(exps)
    sigma = math.sqrt(1 / 3)
    expected = [(1 / 3) / (sigma + EPS), (-2 / 3) / (sigma + EPS), (1 / 3) / (sigma + EPS)] + [0.0] * 4
    np.testing.assert_allclose(per_sequence(batch), expected, rtol=1e-6)
    assert batch.advantages.shape == (7, 4)
    assert batch.advantages.dtype == torch.float32
    assert torch.equal(batch.advantages, batch.returns)
    assert torch.equal(batch.advantages[3:], torch.zeros(4, 4))
    # broadcast over the response, zero on padding (row 1 has 2 tokens)
    assert batch.advantages[1].tolist() == pytest.approx([expected[1]] * 2 + [0.0, 0.0])
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx((2 / 3 + 0.7) / 2)
    assert float(metrics["group_advantages/reward_std/max"]) == pytest.approx(sigma)
    assert int(metrics["group_advantages/singleton_count"]) == 1


def test_without_std_normalisation_scores_are_centred() -> None:
    batch, _ = GRPOVerlAdvantage(norm_adv_by_std_in_grpo=False)(make_exps([[1, 0, 1], [2, 2], [5.0]]))
    np.testing.assert_allclose(per_sequence(batch), [1 / 3, -2 / 3, 1 / 3, 0, 0, 0], rtol=1e-6, atol=1e-7)


def test_token_level_rewards_are_summed_and_action_mask_applies() -> None:
    # Sequence scores 2 and 0 -> mean 1, std √2 -> ±1/(√2+ε); the second token of row 0 is not an action.
    exps = [
        Experience(
            eid=EID(batch=0, task=0, run=i, suffix=f"t{i}"),
            tokens=[1, 2, 3, 4, 5],
            prompt_length=2,
            token_level_reward=tlr,
            action_mask=mask,
        )
        for i, (tlr, mask) in enumerate((([1.0, 0.0, 1.0], [True, False, True]), ([0.0] * 3, [True] * 3)))
    ]
    batch, _ = GRPOVerlAdvantage()(exps)
    a = 1 / (math.sqrt(2) + EPS)
    assert batch.advantages.tolist() == [pytest.approx([a, 0.0, a]), pytest.approx([-a] * 3)]


def test_missing_reward_is_rejected() -> None:
    with pytest.raises(ValueError, match="f0r1"):
        GRPOVerlAdvantage()(make_exps([[1.0, None]]))


def test_compute_has_no_host_sync() -> None:
    batch = ExperienceBatch.from_experiences(make_exps([[0, 1, 1], [0.7] * 4, [2.0], [3, 1]]))
    for args in ({}, {"norm_adv_by_std_in_grpo": False}):
        fn = GRPOVerlAdvantage(**args)
        with count_host_syncs() as log:
            advantages, returns, metrics = fn.compute(batch)
        assert len(log) == 0, log.describe()
        assert advantages.shape == returns.shape == (10, 3)
        assert all(v.dim() == 0 for v in metrics.values())


# ---------------------------------------------------------------------------------------- reference


def run_reference(batch: ExperienceBatch, epsilon: float = EPS) -> torch.Tensor:
    """The reference on a DataProto stand-in: token_level_rewards, response_mask, uid = eid.tid."""
    fn = import_reference("trinity.algorithm.advantage_fn.grpo_advantage").GRPOAdvantageFn(epsilon=epsilon)
    data = SimpleNamespace(
        batch={
            "token_level_rewards": batch.token_level_scores(),
            "response_mask": batch.response_mask.float(),
        },
        non_tensor_batch={"uid": np.array([e.eid.tid for e in batch.experiences], dtype=object)},
    )
    fn(data)
    return data.batch["advantages"]


@st.composite
def informative_batches(draw: st.DrawFn) -> tuple[list[list[float]], list[list[int]], list[int]]:
    """Groups of 2..6 integer rewards with at least two distinct values (no singleton, no flat group)."""
    groups, lengths = [], []
    for n in draw(st.lists(st.integers(2, 6), min_size=1, max_size=5)):
        rewards = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n).filter(lambda r: len(set(r)) > 1))
        groups.append([float(r) for r in rewards])
        lengths.append(draw(st.lists(st.integers(1, 5), min_size=n, max_size=n)))
    order = draw(st.permutations(range(sum(len(g) for g in groups))))
    return groups, lengths, list(order)


@pytest.mark.reference
@settings(max_examples=40, deadline=None)
@given(data=informative_batches(), epsilon=st.sampled_from([1e-6, 0.01]))
def test_agrees_with_the_reference_on_informative_groups(data: tuple, epsilon: float) -> None:
    groups, lengths, order = data
    exps = [make_exps(groups, lengths)[i] for i in order]
    ours, _ = GRPOVerlAdvantage(epsilon=epsilon)(ExperienceBatch.from_experiences(exps))
    theirs = run_reference(ExperienceBatch.from_experiences(exps), epsilon)
    torch.testing.assert_close(ours.advantages, theirs, rtol=1e-5, atol=1e-5)
    r = np.array([e.reward for e in exps])
    np.testing.assert_allclose(
        per_sequence(ours), numpy_grpo(r, np.array([e.eid.task for e in exps]), epsilon), rtol=1e-6
    )


@pytest.mark.reference
def test_singleton_gets_zero_where_the_reference_uses_the_raw_score() -> None:
    batch = ExperienceBatch.from_experiences(make_exps([[0.0, 2.0], [3.0]]))
    theirs = run_reference(batch)
    ours, _ = GRPOVerlAdvantage()(batch)
    assert float(theirs[2, 0]) == pytest.approx(3.0 / (1.0 + EPS))  # mean 0, std 1 placeholder
    assert torch.equal(ours.advantages[2], torch.zeros(3))


@pytest.mark.reference
def test_zero_variance_group_is_exactly_zero_unlike_the_reference() -> None:
    worst_reference = 0.0
    for group in ([v] * n for v in (0.1, 0.7, 1 / 3, 0.3, 2.2) for n in (3, 5, 6, 7, 9, 11)):
        batch = ExperienceBatch.from_experiences(make_exps([group]))
        ours, _ = GRPOVerlAdvantage()(batch)
        assert torch.equal(ours.advantages, torch.zeros_like(ours.advantages))
        worst_reference = max(worst_reference, float(run_reference(batch).abs().max()))
    # the reference's float32 mean (zero-variance-groups) shows on at least one group
    assert worst_reference > 1e-3
