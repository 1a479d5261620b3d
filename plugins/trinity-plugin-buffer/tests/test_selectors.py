"""Golden tests of the plugin's task selectors, derived by hand from their formulas."""

from __future__ import annotations

import math

import pytest
import torch
from trinity_plugin_buffer import DifficultyBasedSelector, OfflineEasy2HardSelector


def test_easy2hard_serves_the_column_ascending_with_ties_in_order() -> None:
    columns = {"difficulty": torch.tensor([3.0, 1.0, 2.0, 1.0], dtype=torch.float64)}
    selector = OfflineEasy2HardSelector(size=4, columns=columns)
    assert selector.get_indices(3).tolist() == [1, 3, 2]  # 1.0 (row 1), 1.0 (row 3), 2.0 (row 2)
    assert selector.get_indices(3).tolist() == [0, 1, 3]  # 3.0, then the curriculum again
    assert selector.state_dict() == {"cursor": 6}


def test_easy2hard_with_a_pass_rate_column_serves_the_highest_first() -> None:
    columns = {"pass_rate": torch.tensor([0.2, 0.9, 0.5], dtype=torch.float64)}
    selector = OfflineEasy2HardSelector(size=3, columns=columns, key="pass_rate", higher_is_easier=True)
    assert selector.get_indices(3).tolist() == [1, 2, 0]
    assert selector.required_columns() == ("pass_rate",)


def test_difficulty_estimates_follow_the_beta_update() -> None:
    selector = DifficultyBasedSelector(size=3, responses=4)
    # alpha = 1 + 4 v, beta = 1 + 4 (1 - v); row 2 unseen keeps the prior.
    selector.update(torch.tensor([0, 1]), torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert selector.alpha.tolist() == [5.0, 1.0, 1.0]
    assert selector.beta.tolist() == [1.0, 5.0, 1.0]
    assert selector.estimate().tolist() == pytest.approx([5 / 6, 1 / 6, 1 / 2])
    # Scores -|p - 0.5| = [-1/3, -1/3, 0]; softmax with tau 0.1: exp(-10/3) twice and 1.
    p = selector.probabilities()
    e = math.exp(-10 / 3)
    assert p.tolist() == pytest.approx([e / (2 * e + 1), e / (2 * e + 1), 1 / (2 * e + 1)])
    metrics = selector.metrics(torch.tensor([0, 2]))
    assert metrics["predicted_pass_rate"].item() == pytest.approx((5 / 6 + 1 / 2) / 2)
    assert metrics["seen_fraction"].item() == pytest.approx(2 / 3)


def test_difficulty_greedy_takes_the_nearest_rows_ties_by_row() -> None:
    selector = DifficultyBasedSelector(size=3, responses=4, temperature=0)
    selector.update(torch.tensor([0, 1]), torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert selector.get_indices(2).tolist() == [2, 0]
    assert selector.get_indices(5).tolist() == [2, 0, 1, 2, 0]


def test_difficulty_decay_and_nan_feedback() -> None:
    selector = DifficultyBasedSelector(size=2, responses=2, decay=0.5)
    selector.update(torch.tensor([0, 1]), torch.tensor([1.0, math.nan], dtype=torch.float64))
    # alpha_0 = 0.5 * 1 + 0.5 * 1 + 2 = 3; row 1 only decays toward the prior (it stays 1).
    assert selector.alpha.tolist() == [3.0, 1.0]
    assert selector.beta.tolist() == [1.0, 1.0]
    selector.update(torch.tensor([0]), torch.tensor([0.0], dtype=torch.float64))
    assert selector.alpha.tolist() == [2.0, 1.0]
    assert selector.beta.tolist() == [3.0, 1.0]
    assert selector.seen.tolist() == [True, False]


def test_difficulty_sampling_prefers_rows_near_the_target() -> None:
    selector = DifficultyBasedSelector(size=20, responses=16, generator=torch.Generator().manual_seed(0))
    rows = torch.arange(20)
    selector.update(rows, torch.where(rows < 10, 1.0, 0.5).to(torch.float64))  # 0..9 solved, 10..19 half
    drawn = torch.cat([selector.get_indices(5) for _ in range(40)])
    assert (drawn >= 10).double().mean() > 0.95
    with pytest.raises(ValueError, match="rows"):
        DifficultyBasedSelector(size=3).load_state_dict(selector.state_dict())
