"""Golden values of the rollout-correction weights, worked by hand from the README's formulas."""

from __future__ import annotations

import math

import pytest
import torch
from trinity_plugin_rollout_correction import rollout_is_weights

LN2, LN3 = math.log(2.0), math.log(3.0)
# Two responses; row 0 has 3 tokens, row 1 has 2 (its third column is padding with a wild log-ratio).
OLD = torch.tensor([[LN2, 0.0, -LN2], [LN3, LN3, 50.0]])
ROLLOUT = torch.zeros(2, 3)
MASK = torch.tensor([[True, True, True], [True, True, False]])


def weights(level: str, mode: str, upper: float = 2.5, lower: float = 0.6) -> torch.Tensor:
    w, _ = rollout_is_weights(OLD, ROLLOUT, MASK, level=level, mode=mode, upper=upper, lower=lower)  # type: ignore[arg-type]
    return w


def test_token_truncate_caps_each_ratio_at_upper() -> None:
    # token ratios: 2, 1, 1/2 | 3, 3 -> min(., 2.5)
    expected = torch.tensor([[2.0, 1.0, 0.5], [2.5, 2.5, 0.0]])
    torch.testing.assert_close(weights("token", "truncate"), expected)


def test_token_mask_zeroes_ratios_outside_the_band() -> None:
    # band [0.6, 2.5]: 2 and 1 stay, 1/2 < 0.6 and 3 > 2.5 are masked
    expected = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(weights("token", "mask"), expected)


def test_sequence_level_uses_the_product_of_the_token_ratios() -> None:
    # row 0: 2 * 1 * 1/2 = 1; row 1: 3 * 3 = 9 (padding ignored)
    torch.testing.assert_close(
        weights("sequence", "truncate", upper=10.0), torch.tensor([[1.0] * 3, [9.0, 9.0, 0.0]])
    )
    torch.testing.assert_close(weights("sequence", "truncate"), torch.tensor([[1.0] * 3, [2.5, 2.5, 0.0]]))
    torch.testing.assert_close(weights("sequence", "mask"), torch.tensor([[1.0] * 3, [0.0, 0.0, 0.0]]))


def test_metrics() -> None:
    _, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, level="token", mode="truncate", upper=2.5, lower=0.4)
    # weights 2 + 1 + 0.5 + 2.5 + 2.5 = 8.5 over 5 tokens; 2 of 5 truncated; log-ratios sum 2 ln 3
    assert metrics["rollout_is_mean"].item() == pytest.approx(8.5 / 5)
    assert metrics["rollout_is_clipped_frac"].item() == pytest.approx(2 / 5)
    assert metrics["rollout_is_log_ratio_mean"].item() == pytest.approx(2 * LN3 / 5)


def test_equal_policies_give_weight_one_and_no_gradient() -> None:
    old = torch.randn(3, 4, requires_grad=True)
    w, _ = rollout_is_weights(
        old,
        old.detach(),
        torch.ones(3, 4, dtype=torch.bool),
        level="sequence",
        mode="mask",
        upper=2.0,
        lower=0.5,
    )
    torch.testing.assert_close(w, torch.ones(3, 4))
    assert not w.requires_grad
