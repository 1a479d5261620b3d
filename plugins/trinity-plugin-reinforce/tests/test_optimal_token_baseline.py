"""optimal_token_baseline and tir_optimal_token_baseline: golden values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from reinforce_support import Spec, make_batch
from trinity_plugin_reinforce.optimal_token_baseline import OptimalTokenBaselineAdvantage
from trinity_plugin_reinforce.tir_optimal_token_baseline import TIROptimalTokenBaselineAdvantage

F64 = torch.float64
HALF, QUARTER = math.log(0.5), math.log(0.25)


def _columns(width: int = 3) -> dict[str, torch.Tensor]:
    # Row a: pi = 0.5, sum pi^2 = 0.5 -> w = 1 - 1 + 0.5 = 0.5. Row b: pi = 0.25, sum pi^2 = 0.25 ->
    # w = 1 - 0.5 + 0.25 = 0.75. Row c (alone in its group): any.
    old = torch.tensor([[HALF] * width, [QUARTER] * width, [HALF] * width])
    sq = torch.tensor([[0.5] * width, [0.25] * width, [0.5] * width])
    return {"old_logprobs": old, "sum_pi_squared": sq}


def _specs(mask_a: list[bool]) -> list[Spec]:
    return [
        Spec(0, 1.0, mask_a, run=0),  # reward 1 on its last token
        Spec(0, 2.0, [True] * 3, run=1),  # reward 2 on its last token
        Spec(1, 3.0, [True] * 2),  # a group of one
    ]


def test_otb_golden() -> None:
    # G_a = (1, 1), G_b = (2, 2, 2); W_a = (0.5, 1.0), W_b = (0.75, 1.5, 2.25).
    # B_0 = (1*0.5 + 2*0.75) / (0.5 + 0.75) = 1.6; B_1 = (1*1 + 2*1.5) / (1 + 1.5) = 1.6;
    # B_2 (only b; b is the unique longest, second-longest length 2) = 0 with handle_zero_tail.
    batch = make_batch(_specs([True, True]), extras=_columns())
    _, metrics = OptimalTokenBaselineAdvantage()(batch)
    expected = torch.tensor([[-0.6, -0.6, 0.0], [0.4, 0.4, 2.0], [3.0, 3.0, 0.0]], dtype=F64)
    torch.testing.assert_close(batch.advantages.double(), expected, rtol=1e-6, atol=1e-6)
    returns = torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 2.0], [3.0, 3.0, 0.0]], dtype=F64)
    torch.testing.assert_close(batch.returns.double(), returns)
    assert torch.isfinite(metrics["otb_baseline_mean"])


def test_otb_without_zero_tail_uses_the_row_itself() -> None:
    # B_2 = 2 * 2.25 / 2.25 = 2 -> A_b,2 = 0.
    batch = make_batch(_specs([True, True]), extras=_columns())
    OptimalTokenBaselineAdvantage(handle_zero_tail=False)(batch)
    torch.testing.assert_close(batch.advantages[1].double(), torch.tensor([0.4, 0.4, 0.0], dtype=F64))


def test_otb_rollout_is_weights_square_into_w() -> None:
    # rho_a = 2 -> w_a = 0.5 * 4 = 2, W_a = (2, 4): B_0 = (1*2 + 2*0.75) / 2.75 = 14/11,
    # B_1 = (1*4 + 2*1.5) / 5.5 = 14/11 -> A_a = 1 - 14/11 = -3/11.
    extras = _columns()
    extras["rollout_is_weights"] = torch.tensor([[2.0] * 3, [1.0] * 3, [1.0] * 3])
    batch = make_batch(_specs([True, True]), extras=extras)
    OptimalTokenBaselineAdvantage()(batch)
    torch.testing.assert_close(
        batch.advantages[0, :2].double(), torch.full((2,), -3 / 11, dtype=F64), rtol=1e-6, atol=1e-6
    )


def test_tir_otb_compares_the_kth_model_tokens() -> None:
    # Row a has a tool token at position 1 (mask T F T); its model tokens are positions 0 and 2 with
    # G = (1, 1) and W = (0.5, 1.0): compacted, the rows are those of test_otb_golden.
    batch = make_batch(_specs([True, False, True]), extras=_columns())
    TIROptimalTokenBaselineAdvantage()(batch)
    expected = torch.tensor([[-0.6, 0.0, -0.6], [0.4, 0.4, 2.0], [3.0, 3.0, 0.0]], dtype=F64)
    torch.testing.assert_close(batch.advantages.double(), expected, rtol=1e-6, atol=1e-6)
    # OTB compares by padded position instead: B_2 = (1*1 + 2*2.25) / (1 + 2.25) = 5.5/3.25.
    batch = make_batch(_specs([True, False, True]), extras=_columns())
    OptimalTokenBaselineAdvantage()(batch)
    assert float(batch.advantages[0, 2]) == pytest.approx(1 - 5.5 / 3.25, rel=1e-6)


def test_tir_otb_equals_otb_without_holes() -> None:
    g = torch.Generator().manual_seed(0)
    specs = [Spec(i // 3, float(i % 2), [True] * (1 + i % 4), run=i % 3) for i in range(9)]
    extras = {
        "old_logprobs": -torch.rand(9, 4, generator=g),
        "sum_pi_squared": torch.rand(9, 4, generator=g),
    }
    a, b = make_batch(specs, extras=extras), make_batch(specs, extras=extras)
    OptimalTokenBaselineAdvantage()(a)
    TIROptimalTokenBaselineAdvantage()(b)
    torch.testing.assert_close(a.advantages, b.advantages)


def test_otb_without_its_columns_says_what_the_trainer_must_provide() -> None:
    batch = make_batch(_specs([True, True]))
    with pytest.raises(KeyError, match=r"sum_pi_squared.*batch\.extras"):
        OptimalTokenBaselineAdvantage()(batch)
    assert "sum_pi_squared" in OptimalTokenBaselineAdvantage.required_fields
