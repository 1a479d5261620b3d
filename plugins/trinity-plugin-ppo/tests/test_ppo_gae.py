"""The ``ppo`` advantage function (GAE): a hand-computed example, the scan against the sequential masked
recursion, whitening, masking, host syncs and the batch interface."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_ppo import PPOAdvantageFn, masked_gae, reverse_linear_scan

from trinity_core.batch import ExperienceBatch
from trinity_core.experience import Experience
from trinity_core.ops import masked_whiten
from trinity_core.testing import count_host_syncs


def sequential_masked_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook backwards loop that skips masked positions (verl's masked recursion), per element."""
    b, t = rewards.shape
    adv = torch.zeros(b, t, dtype=torch.float64)
    for i in range(b):
        next_value, next_adv = 0.0, 0.0
        for j in reversed(range(t)):
            if not mask[i, j]:
                continue
            delta = float(rewards[i, j]) + gamma * next_value - float(values[i, j])
            next_adv = delta + gamma * lam * next_adv
            next_value = float(values[i, j])
            adv[i, j] = next_adv
    returns = torch.where(mask, adv + values.double(), 0.0)
    return adv, returns


def whiten_by_hand(x: list[float]) -> list[float]:
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / (len(x) - 1)
    return [(v - mean) / math.sqrt(var + 1e-8) for v in x]


# One row, γ = 0.9, λ = 0.8, token 2 is an observation token (masked): its reward 5 and value 9 are skipped.
#   δ3 = 1 + 0 − 2 = −1;  δ1 = 0 + 0.9·2 − 1 = 0.8;  δ0 = 0 + 0.9·1 − 0.5 = 0.4
#   A3 = −1;  A1 = 0.8 + 0.72·(−1) = 0.08;  A0 = 0.4 + 0.72·0.08 = 0.4576
#   G = A + V: 0.9576, 1.08, (0), 1.0
GOLDEN_REWARDS = [[0.0, 0.0, 5.0, 1.0]]
GOLDEN_VALUES = [[0.5, 1.0, 9.0, 2.0]]
GOLDEN_MASK = [[True, True, False, True]]
GOLDEN_ADV = [[0.4576, 0.08, 0.0, -1.0]]
GOLDEN_RET = [[0.9576, 1.08, 0.0, 1.0]]


def test_golden_masked_gae() -> None:
    adv, ret = masked_gae(
        torch.tensor(GOLDEN_REWARDS), torch.tensor(GOLDEN_VALUES), torch.tensor(GOLDEN_MASK), 0.9, 0.8
    )
    torch.testing.assert_close(adv, torch.tensor(GOLDEN_ADV, dtype=torch.float64), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ret, torch.tensor(GOLDEN_RET, dtype=torch.float64), rtol=1e-6, atol=1e-7)


def golden_batch() -> ExperienceBatch:
    # Same row as above as an experience (reward on the last token), plus a right-padded row of length 2.
    exps = [
        Experience(tokens=[7, 1, 2, 3, 4], prompt_length=1, action_mask=[1, 1, 0, 1], reward=1.0),
        Experience(tokens=[7, 1, 2], prompt_length=1, reward=2.0),
    ]
    batch = ExperienceBatch.from_experiences(exps)
    batch.extras["values"] = torch.tensor([[0.5, 1.0, 9.0, 2.0], [1.0, 0.5, 0.0, 0.0]])
    return batch


def test_advantage_fn_on_a_batch_golden() -> None:
    # Row 1 (γ = 0.9, λ = 0.8): δ1 = 2 − 0.5 = 1.5, δ0 = 0.9·0.5 − 1 = −0.55; A1 = 1.5, A0 = −0.55 + 0.72·1.5.
    row1 = [-0.55 + 0.72 * 1.5, 1.5]
    batch, metrics = PPOAdvantageFn(gamma=0.9, lam=0.8)(golden_batch())
    assert metrics == {}
    selected = [0.4576, 0.08, -1.0, *row1]
    w = whiten_by_hand(selected)
    expected_adv = [[w[0], w[1], 0.0, w[2]], [w[3], w[4], 0.0, 0.0]]
    expected_ret = [[0.9576, 1.08, 0.0, 1.0], [row1[0] + 1.0, row1[1] + 0.5, 0.0, 0.0]]
    torch.testing.assert_close(batch.advantages, torch.tensor(expected_adv), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(batch.returns, torch.tensor(expected_ret), rtol=1e-5, atol=1e-6)
    assert batch.advantages.dtype == torch.float32


def test_defaults_are_the_references_and_flags() -> None:
    assert PPOAdvantageFn.default_args() == {"gamma": 1.0, "lam": 1.0}
    assert PPOAdvantageFn.compute_in_trainer()
    assert "values" in PPOAdvantageFn.required_fields


def test_token_level_rewards_from_the_trainer_take_precedence() -> None:
    batch = golden_batch()
    kl_shaped = torch.tensor([[-0.1, -0.1, 0.0, 0.9], [-0.2, 1.8, 0.0, 0.0]])
    batch.extras["token_level_rewards"] = kl_shaped
    adv, ret, _ = PPOAdvantageFn().compute(batch)
    expected_raw, expected_ret = masked_gae(kl_shaped, batch.extras["values"], batch.action_mask, 1.0, 1.0)
    torch.testing.assert_close(ret, expected_ret.float())
    mask = batch.action_mask
    torch.testing.assert_close(adv, masked_whiten(expected_raw, mask).float())


def test_missing_values_say_who_needs_them() -> None:
    batch = golden_batch()
    del batch.extras["values"]
    with pytest.raises(KeyError, match=r"values.*needed by advantage_fn"):
        PPOAdvantageFn()(batch)


def random_case(seed: int, b: int = 4, t: int = 11) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]) & ~(torch.rand(b, t, generator=g) < 0.25)
    mask[:, 0] = True
    return torch.randn(b, t, generator=g), torch.randn(b, t, generator=g), mask


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), gamma=st.floats(0.0, 1.0), lam=st.floats(0.0, 1.0))
def test_scan_equals_the_sequential_masked_recursion(seed: int, gamma: float, lam: float) -> None:
    rewards, values, mask = random_case(seed)
    adv, ret = masked_gae(rewards, values, mask, gamma, lam)
    exp_adv, exp_ret = sequential_masked_gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, exp_adv, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ret, exp_ret, rtol=1e-10, atol=1e-12)


def test_long_rows_stay_accurate() -> None:
    # 1500 steps of γλ = 0.99: products underflow harmlessly; compare with the sequential loop.
    rewards, values, mask = random_case(3, b=2, t=1500)
    adv, _ = masked_gae(rewards, values, mask, 0.995, 0.995)
    expected, _ = sequential_masked_gae(rewards, values, mask, 0.995, 0.995)
    torch.testing.assert_close(adv, expected, rtol=1e-9, atol=1e-9)


def test_reverse_linear_scan_golden() -> None:
    # x_2 = 3; x_1 = 2 + 0.5·3 = 3.5; x_0 = 1 + 2·3.5 = 8.
    out = reverse_linear_scan(torch.tensor([[2.0, 0.5, 7.0]]), torch.tensor([[1.0, 2.0, 3.0]]))
    assert out.tolist() == [[8.0, 3.5, 3.0]]


def test_nan_at_masked_positions_changes_nothing() -> None:
    rewards, values, mask = random_case(5)
    clean = masked_gae(rewards, values, mask, 0.9, 0.95)
    dirty = masked_gae(
        torch.where(mask, rewards, math.nan), torch.where(mask, values, math.inf), mask, 0.9, 0.95
    )
    assert torch.equal(clean[0], dirty[0])
    assert torch.equal(clean[1], dirty[1])


def test_whitened_advantages_have_zero_mean_unit_std_and_zero_outside_the_mask() -> None:
    exps = [Experience(tokens=[1, *range(2, 2 + n)], prompt_length=1, reward=float(n)) for n in (3, 5, 2, 6)]
    batch = ExperienceBatch.from_experiences(exps)
    batch.extras["values"] = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    batch, _ = PPOAdvantageFn(gamma=0.99, lam=0.95)(batch)
    mask = batch.response_mask
    selected = batch.advantages[mask].double()
    assert float(selected.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(selected.std()) == pytest.approx(1.0, rel=1e-5)
    assert bool((batch.advantages[~mask] == 0).all())
    assert bool((batch.returns[~mask] == 0).all())


def test_no_host_sync() -> None:
    batch = golden_batch()
    fn = PPOAdvantageFn(gamma=0.9, lam=0.8)
    with count_host_syncs() as log:
        fn.compute(batch)
    assert len(log) == 0, log.describe()
