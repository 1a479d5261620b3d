"""Golden values of the rejection sampling (``rollout_rs``), worked by hand from the README's formulas."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_rollout_correction.rejection import REJECTION_OPTIONS, parse_rejection, rejection_keep

LN2, LN3 = math.log(2.0), math.log(3.0)
# δ = old − rollout: row 0 (3 tokens) ln 2, 0, −ln 2; row 1 (2 tokens) ln 3, ln 3, then padding.
OLD = torch.tensor([[LN2, 0.0, -LN2], [LN3, LN3, 50.0]])
ROLLOUT = torch.zeros(2, 3)
MASK = torch.tensor([[True, True, True], [True, True, False]])
ROW0 = [[True, True, True], [False, False, False]]
NONE = [[False] * 3, [False] * 3]

# Per-token scores by hand:
#   k2 = ½δ²:          ln2 -> 0.2402, 0 -> 0, −ln2 -> 0.2402 | ln3 -> 0.6035
#   k3 = e^δ − 1 − δ:  ln2 -> 0.3069, 0 -> 0, −ln2 -> 0.1931 | ln3 -> 0.9014
# Per row (sum, mean, max):
#   k1: row 0 sum 0 (ratio 1), mean 0 | row 1 sum 2 ln3 (ratio 9), mean ln3 (ratio 3)
#   k2: row 0 0.4805, 0.1602, 0.2402 | row 1 1.2069, 0.6035, 0.6035
#   k3: row 0 0.5,    0.1667, 0.3069 | row 1 1.8028, 0.9014, 0.9014
CASES = [
    ("token_k1", "0.6_2.5", [[True, True, False], [False, False, False]]),
    ("token_k2", 0.2, [[False, True, False], [False, False, False]]),
    ("token_k2", 0.25, ROW0),
    ("token_k3", 0.25, [[False, True, True], [False, False, False]]),  # k3 is not symmetric in δ
    ("seq_sum_k1", "0.5_2.0", ROW0),
    ("seq_sum_k1", 10.0, [[True] * 3, [True, True, False]]),  # lower 1/10 ≤ 1 and 9 ≤ 10
    ("seq_mean_k1", 2.0, ROW0),
    ("seq_mean_k1", 4.0, [[True] * 3, [True, True, False]]),
    ("seq_sum_k2", 1.0, ROW0),
    ("seq_mean_k2", 0.5, ROW0),
    ("seq_max_k2", 0.2, NONE),
    ("seq_max_k2", 0.3, ROW0),
    ("seq_sum_k3", 0.6, ROW0),
    ("seq_mean_k3", 0.2, ROW0),
    ("seq_max_k3", 0.3, NONE),
    ("seq_max_k3", 0.31, ROW0),
]


@pytest.mark.parametrize(("option", "threshold", "expected"), CASES)
def test_each_option_keeps_what_the_hand_computation_says(
    option: str, threshold: str | float, expected: list[list[bool]]
) -> None:
    keep, metrics = rejection_keep(OLD, ROLLOUT, MASK, parse_rejection(option, threshold))
    assert keep.tolist() == expected
    rejected = 5 - sum(map(sum, expected))
    assert metrics["rollout_rs_masked_frac"].item() == pytest.approx(rejected / 5)


def test_options_combine_with_and_and_report_each_share() -> None:
    criteria = parse_rejection("token_k3, seq_max_k2", "0.25,0.3")
    keep, metrics = rejection_keep(OLD, ROLLOUT, MASK, criteria)
    # token_k3 keeps (0, 1), (0, 2); seq_max_k2 keeps row 0
    assert keep.tolist() == [[False, True, True], [False, False, False]]
    assert metrics["rollout_rs_token_k3_frac"].item() == pytest.approx(3 / 5)
    assert metrics["rollout_rs_seq_max_k2_frac"].item() == pytest.approx(2 / 5)
    assert metrics["rollout_rs_masked_frac"].item() == pytest.approx(3 / 5)


def test_thresholds_parse_as_verl_spells_them() -> None:
    one = parse_rejection("token_k1,seq_mean_k3,token_k1", "2.0")  # duplicates dropped, one for all
    assert [(c.option, c.lower, c.upper) for c in one] == [("token_k1", 0.5, 2.0), ("seq_mean_k3", 0.0, 2.0)]
    two = parse_rejection("token_k1,seq_max_k2", "0.8_1.5, 0.1")
    assert [(c.lower, c.upper) for c in two] == [(0.8, 1.5), (0.0, 0.1)]


@pytest.mark.parametrize(
    ("options", "threshold", "message"),
    [
        ("seq_max_k1", 2.0, "unknown option"),
        ("token_k1", None, "needs rollout_rs_threshold"),
        ("token_k1,token_k2,token_k3", "2.0,3.0", "2 values for 3 options"),
        ("token_k2", "0.5_2.0", "not a number"),
        ("token_k1", "2.0_0.5", "lower ≤ upper"),
    ],
)
def test_bad_specifications_say_what_is_wrong(
    options: str, threshold: str | float | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rejection(options, threshold)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(2, 6),
    cols=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    option=st.sampled_from(REJECTION_OPTIONS),
    threshold=st.floats(0.05, 5.0),
    split=st.integers(1, 5),
)
def test_decisions_are_per_row_so_micro_batches_agree_and_on_policy_keeps_all(
    rows: int, cols: int, seed: int, option: str, threshold: float, split: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    rollout = old + 0.5 * torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    mask = torch.rand(rows, cols, generator=gen) < 0.8
    criteria = parse_rejection(option, max(threshold, 1.0) if option.endswith("k1") else threshold)
    whole, _ = rejection_keep(old, rollout, mask, criteria)
    cut = min(split, rows - 1)
    parts = [
        rejection_keep(old[s], rollout[s], mask[s], criteria)[0] for s in (slice(0, cut), slice(cut, None))
    ]
    assert torch.equal(whole, torch.cat(parts))
    assert not (whole & ~mask).any()  # padding is never kept
    on_policy, metrics = rejection_keep(old, old.clone(), mask, criteria)
    assert torch.equal(on_policy, mask)
    assert metrics["rollout_rs_masked_frac"].item() == 0.0
