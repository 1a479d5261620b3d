"""Comparison with the reference ``trinity.algorithm.advantage_fn.ppo_advantage.PPOAdvantageFn``: equal on
right-padded rows with zero rewards and values in the padding; the documented differences
(reference-differences.md#gae-masks) are pinned down."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_ppo import masked_gae

from trinity_core.ops import masked_whiten
from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


class _DataProto:
    """Stand-in for verl's DataProto: the reference GAE only reads and writes ``.batch``."""

    def __init__(self, batch: dict[str, torch.Tensor]) -> None:
        self.batch = batch


@pytest.fixture(scope="module")
def reference_gae() -> Iterator[Any]:
    # verl is not installed with the reference; its module imports DataProto at import time only.
    stub = types.ModuleType("verl")
    stub.DataProto = _DataProto  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "verl", stub)
        yield import_reference("trinity.algorithm.advantage_fn.ppo_advantage").PPOAdvantageFn


def run_reference(
    cls: Any, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, **args: float
) -> Any:
    proto = _DataProto({"token_level_rewards": rewards, "values": values, "response_mask": mask.float()})
    cls(**args)(proto)
    return proto.batch["advantages"], proto.batch["returns"]


def right_padded(seed: int, b: int = 5, t: int = 10) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = torch.arange(t)[None, :] < lengths[:, None]
    rewards = torch.where(mask, torch.randn(b, t, generator=g, dtype=torch.float64), 0.0)
    values = torch.where(mask, torch.randn(b, t, generator=g, dtype=torch.float64), 0.0)
    return rewards, values, mask


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), gamma=st.floats(0.5, 1.0), lam=st.floats(0.5, 1.0))
def test_agrees_with_the_reference_on_right_padded_rows(
    reference_gae: Any, seed: int, gamma: float, lam: float
) -> None:
    rewards, values, mask = right_padded(seed)
    raw, ret = masked_gae(rewards, values, mask, gamma, lam)
    ours = masked_whiten(raw, mask)
    ref_adv, ref_ret = run_reference(reference_gae, rewards, values, mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(ours[mask], ref_adv[mask], rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(ret[mask], ref_ret[mask], rtol=1e-9, atol=1e-12)
    assert bool((ours[~mask] == 0).all())


def test_reference_lets_padding_values_leak_ours_ignores_them(reference_gae: Any) -> None:
    # Row of 2 real tokens; the critic wrote 10.0 into the padding. γ = 1, λ = 0.5.
    # Ours: δ1 = 1 − 0.25 = 0.75, A1 = 0.75; δ0 = 0.25 − 0.5, A0 = −0.25 + 0.5·0.75 = 0.125 -> G = [0.625, 1].
    # Reference: δ2 = −10; δ1 = 1 + 10 − 0.25 = 10.75, A1 = 10.75 − 5 = 5.75;
    # A0 = −0.25 + 2.875 = 2.625 -> G = [3.125, 6].
    rewards = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 0.25, 10.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    _, ref_ret = run_reference(reference_gae, rewards, values, mask, gamma=1.0, lam=0.5)
    _, ours = masked_gae(rewards, values, mask, 1.0, 0.5)
    assert ours[0].tolist() == [0.625, 1.0, 0.0]
    assert ref_ret[0, :2].tolist() == [3.125, 6.0]


def test_reference_discounts_observation_tokens_ours_skips_them(reference_gae: Any) -> None:
    # Token 1 is an observation token inside the response: γ = 0.5, λ = 1.
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.zeros(1, 3, dtype=torch.float64)
    mask = torch.tensor([[True, False, True]])
    _, ref_ret = run_reference(reference_gae, rewards, values, mask, gamma=0.5, lam=1.0)
    _, ours = masked_gae(rewards, values, mask, 0.5, 1.0)
    assert float(ours[0, 0]) == 0.5  # one action step of discount
    assert float(ref_ret[0, 0]) == 0.25  # two steps: the observation token is discounted too


def test_reference_does_not_remask_and_raises_on_one_token(reference_gae: Any) -> None:
    rewards, values, mask = right_padded(2)
    ref_adv, _ = run_reference(reference_gae, rewards, values, mask)
    assert bool((ref_adv[~mask] != 0).any())
    one = torch.tensor([[True, False]])
    with pytest.raises(ValueError, match="sum of the mask is one"):
        run_reference(reference_gae, torch.ones(1, 2, dtype=torch.float64), torch.zeros(1, 2), one)
    raw, _ = masked_gae(torch.ones(1, 2), torch.zeros(1, 2), one, 1.0, 1.0)
    assert masked_whiten(raw, one).tolist() == [[0.0, 0.0]]
