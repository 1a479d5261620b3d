"""Behaviour pinned where a mutation audit found the tests silent: GAE's masks of any dtype and its
float64 result, the clipped value loss at its lower bound, the MSE loss's metric names."""

from __future__ import annotations

import pytest
import torch
from trinity_plugin_ppo.gae import masked_gae, reverse_linear_scan

from trinity_core import registry


def test_gae_reads_a_mask_of_any_dtype_as_its_nonzero_entries_and_computes_in_float64() -> None:
    rewards = torch.tensor([[0.0, 1.0, 0.0, 2.0]])
    values = torch.tensor([[0.5, 0.25, 9.0, 1.0]])
    selected = torch.tensor([[True, True, False, True]])
    want = masked_gae(rewards, values, selected, gamma=0.9, lam=0.8)
    for mask in (selected.long(), selected.float(), selected.to(torch.uint8) * 3):
        got = masked_gae(rewards, values, mask, gamma=0.9, lam=0.8)
        assert torch.equal(got[0], want[0])
        assert torch.equal(got[1], want[1])
    assert want[0].dtype == torch.float64
    assert want[1].dtype == torch.float64
    # By hand: selected positions 0, 1, 3 (position 2 skipped). Last (3): delta = 2 - 1 = 1, A = 1.
    # Position 1: next is 3; delta = 1 + 0.9 * 1 - 0.25 = 1.65; A = 1.65 + 0.72 * 1 = 2.37.
    # Position 0: next is 1; delta = 0 + 0.9 * 0.25 - 0.5 = -0.275; A = -0.275 + 0.72 * 2.37 = 1.4314.
    torch.testing.assert_close(
        want[0], torch.tensor([[1.4314, 2.37, 0.0, 1.0]], dtype=torch.float64), rtol=0, atol=1e-12
    )


def test_reverse_linear_scan_on_rows_longer_than_the_first_doublings() -> None:
    # x_t = b_t + a_t x_{t+1}, a = 0.5 everywhere, b = 1: x_{T-1} = 1, x_{T-2} = 1.5, ... 2 - 2^(1-k).
    width = 11
    x = reverse_linear_scan(
        torch.full((1, width), 0.5, dtype=torch.float64), torch.ones(1, width, dtype=torch.float64)
    )
    want = torch.tensor([[2 - 2.0 ** (-(width - 1 - t)) for t in range(width)]], dtype=torch.float64)
    torch.testing.assert_close(x, want, rtol=0, atol=1e-15)
    with pytest.raises(
        ValueError, match=r"^reverse_linear_scan: a \(1, 2\) and b \(1, 3\) must have one shape$"
    ):
        reverse_linear_scan(torch.ones(1, 2), torch.ones(1, 3))


def test_the_clipped_value_loss_clips_from_below_too() -> None:
    # One token: V_old = 0, eps = 0.5, V = -1 (below V_old - eps), G = -5. Unclipped (-1 + 5)^2 = 16;
    # clipped V is -0.5: (-0.5 + 5)^2 = 20.25; the larger, times 0.5: 10.125; clipped share 1.
    loss_fn = registry.create("value_loss", "clipped", {"cliprange_value": 0.5})
    loss, metrics = loss_fn(
        torch.tensor([[-1.0]]), torch.tensor([[0.0]]), torch.tensor([[-5.0]]), torch.tensor([[True]])
    )
    assert float(loss) == pytest.approx(10.125)
    assert float(metrics["vf_clipfrac"]) == 1.0


def test_the_mse_value_loss_reports_its_metrics_by_name() -> None:
    loss_fn = registry.create("value_loss", "mse", {})
    vpreds, returns = torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 1.0]])
    loss, metrics = loss_fn(vpreds, torch.zeros(1, 2), returns, torch.tensor([[True, True]]))
    # 0.5 * mean((1 - 0)^2, (3 - 1)^2) = 0.5 * 2.5
    assert float(loss) == pytest.approx(1.25)
    assert set(metrics) == {"vf_loss", "vf_clipfrac", "vpred_mean"}
    assert float(metrics["vf_loss"]) == pytest.approx(1.25)
    assert float(metrics["vf_clipfrac"]) == 0.0
    assert float(metrics["vpred_mean"]) == pytest.approx(2.0)
