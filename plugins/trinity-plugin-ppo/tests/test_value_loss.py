"""The ``clipped`` and ``mse`` value losses: golden values worked out by hand, and properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core import registry
from trinity_core.ops import global_normalizers

# Two rows; row 0 selects 2 tokens, row 1 selects 1 (its second token is padding holding NaN).
VPREDS = torch.tensor([[1.0, 0.0], [2.0, float("nan")]])
VALUES = torch.tensor([[0.0, 0.0], [1.0, float("nan")]])
RETURNS = torch.tensor([[2.0, 1.0], [0.0, float("nan")]])
MASK = torch.tensor([[True, True], [True, False]])


def make(name: str, **args: object) -> object:
    return registry.create("value_loss", name, args)


def test_clipped_golden_token_mean() -> None:
    # cliprange 0.5. Token (0,0): V=1, V_old=0 -> clip 0.5; (1-2)^2=1, (0.5-2)^2=2.25 -> 2.25 (clipped).
    # Token (0,1): V=0=V_old -> 0; (0-1)^2=1 both -> 1. Token (1,0): V=2, V_old=1 -> 1.5; (2-0)^2=4,
    # (1.5-0)^2=2.25 -> 4. Loss 0.5 * (2.25 + 1 + 4) / 3 = 1.208333; clipfrac 1/3; vpred mean 1.
    loss, metrics = make("clipped", cliprange_value=0.5)(VPREDS, VALUES, RETURNS, MASK)
    assert loss.item() == pytest.approx(0.5 * 7.25 / 3)
    assert metrics["vf_loss"].item() == pytest.approx(0.5 * 7.25 / 3)
    assert metrics["vf_clipfrac"].item() == pytest.approx(1 / 3)
    assert metrics["vpred_mean"].item() == pytest.approx(1.0)


def test_clipped_golden_seq_mean_token_sum() -> None:
    # Row sums 2.25 + 1 = 3.25 and 4, mean over 2 rows = 3.625, times 0.5.
    loss, _ = make("clipped", cliprange_value=0.5, loss_agg_mode="seq-mean-token-sum")(
        VPREDS, VALUES, RETURNS, MASK
    )
    assert loss.item() == pytest.approx(0.5 * 3.625)


def test_mse_golden() -> None:
    # (1-2)^2 = 1, (0-1)^2 = 1, (2-0)^2 = 4 -> 0.5 * 6 / 3 = 1.
    loss, metrics = make("mse")(VPREDS, VALUES, RETURNS, MASK)
    assert loss.item() == pytest.approx(1.0)
    assert metrics["vf_clipfrac"].item() == 0.0


def test_gradient_of_clipped_loss_stops_where_the_clipped_term_wins() -> None:
    # d/dV of 0.5 * max(...)/3: token (0,0) is clipped (constant in V): 0; (0,1): (0-1)/3; (1,0): 2/3.
    vpreds = VPREDS.clone().requires_grad_(True)
    loss, _ = make("clipped", cliprange_value=0.5)(vpreds, VALUES, RETURNS, MASK)
    loss.backward()
    assert vpreds.grad is not None
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, -1 / 3], [2 / 3, 0.0]]))


def test_global_normalizers_divide_by_the_step_token_count() -> None:
    # The step has 3 + 3 selected tokens over two micro-batches: this one's sum 7.25 is divided by 6.
    scale = global_normalizers([MASK, MASK])
    loss, _ = make("clipped", cliprange_value=0.5)(VPREDS, VALUES, RETURNS, MASK, loss_scale=scale)
    assert loss.item() == pytest.approx(0.5 * 7.25 / 6)


finite = st.floats(-10, 10, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(finite, finite, finite), min_size=1, max_size=12),
    st.floats(0.01, 5.0),
)
def test_clipped_is_at_least_mse_and_equals_it_for_a_wide_clip(
    rows: list[tuple[float, float, float]], eps: float
) -> None:
    v, old, g = (torch.tensor([[r[i] for r in rows]]) for i in range(3))
    mask = torch.ones_like(v, dtype=torch.bool)
    mse, _ = make("mse")(v, old, g, mask)
    clipped, metrics = make("clipped", cliprange_value=eps)(v, old, g, mask)
    assert clipped.item() >= mse.item() - 1e-5 * (1 + mse.item())
    assert 0.0 <= metrics["vf_clipfrac"].item() <= 1.0
    wide, wide_metrics = make("clipped", cliprange_value=1e4)(v, old, g, mask)
    assert wide.item() == pytest.approx(mse.item(), rel=1e-5, abs=1e-6)
    assert wide_metrics["vf_clipfrac"].item() == 0.0


def test_plugins_list_shows_the_value_losses(capsys: pytest.CaptureFixture[str]) -> None:
    from trinity_core.cli.main import main

    assert main(["plugins", "list", "--kind", "value_loss"]) == 0
    out = capsys.readouterr().out
    assert "value_loss  clipped" in out
    assert "value_loss  mse" in out
