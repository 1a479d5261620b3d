"""The ``importance_sampling`` policy loss: golden values, reference agreement, masking, host syncs and
micro-batch invariance."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ppo_support import grad_of, loss_inputs
from trinity_plugin_ppo import ImportanceSamplingLossFn

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs
from trinity_core.testing.reference import import_reference


def test_golden_values() -> None:
    # r = [2, 0.5, e^20 (clamped from e^30)], A = [1, -2, 1e-9], 4th token masked; token-mean over 3.
    x = {
        "log_prob": torch.tensor([[math.log(2), math.log(0.5), 30.0, 5.0]], dtype=torch.float64),
        "old_log_probs": torch.zeros(1, 4, dtype=torch.float64),
        "response_mask": torch.tensor([[True, True, True, False]]),
        "advantages": torch.tensor([[1.0, -2.0, 1e-9, 7.0]], dtype=torch.float64),
    }
    loss, metrics, grad = grad_of(ImportanceSamplingLossFn(), x)
    big = math.exp(20)
    assert float(loss) == pytest.approx((-2.0 + 1.0 - 1e-9 * big) / 3, rel=1e-12)
    # ∂(−A r)/∂logπ = −A r; the clamped token has zero gradient (outside the clamp range).
    torch.testing.assert_close(grad, torch.tensor([[-2.0 / 3, 1.0 / 3, 0.0, 0.0]], dtype=torch.float64))
    assert float(metrics["ratio/mean"]) == pytest.approx((2 + 0.5 + big) / 3, rel=1e-12)
    assert float(metrics["approx_kl"]) == pytest.approx(-(math.log(2) + math.log(0.5) + 20) / 3, rel=1e-12)
    assert float(metrics["pg_loss"]) == float(loss)


def test_defaults_and_keys() -> None:
    assert ImportanceSamplingLossFn.default_args() == {"loss_agg_mode": "token-mean"}
    assert ImportanceSamplingLossFn().select_keys == ["old_log_probs", "response_mask", "advantages"]


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]),
)
def test_agrees_with_the_reference(seed: int, mode: str) -> None:
    module: Any = import_reference("trinity.algorithm.policy_loss_fn.importance_sampling_policy_loss")
    x = loss_inputs(seed)
    ours = grad_of(ImportanceSamplingLossFn(loss_agg_mode=mode), x)  # type: ignore[arg-type]
    ref_x = {**x, "response_mask": x["response_mask"].double()}
    theirs = grad_of(module.ImportanceSamplingLossFn(loss_agg_mode=mode), ref_x)
    assert float(ours[0]) == pytest.approx(float(theirs[0]), rel=1e-6, abs=1e-10)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-10)
    for key in ("pg_loss", "ratio/mean", "approx_kl"):
        assert float(ours[1][key]) == pytest.approx(theirs[1][key], rel=1e-6, abs=1e-9), key


def test_no_host_sync_and_nan_at_masked_positions_is_ignored() -> None:
    clean = loss_inputs(2)
    hidden = ~clean["response_mask"]
    dirty = {k: (torch.where(hidden, math.nan, v) if v.is_floating_point() else v) for k, v in clean.items()}
    fn = ImportanceSamplingLossFn()
    with count_host_syncs() as log:
        a = grad_of(fn, clean)
    assert len(log) == 0, log.describe()
    b = grad_of(fn, dirty)
    assert torch.equal(a[0], b[0])
    assert torch.equal(a[2], b[2])
    for key in a[1]:
        assert torch.equal(a[1][key], b[1][key]), key


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_with_global_normalizers_sum_to_the_full_batch(mode: str) -> None:
    x = loss_inputs(8, b=6)
    fn = ImportanceSamplingLossFn(loss_agg_mode=mode)  # type: ignore[arg-type]
    full = grad_of(fn, x, loss_scale=global_normalizers(x["response_mask"]))
    parts = [{k: v[:2] for k, v in x.items()}, {k: v[2:] for k, v in x.items()}]
    scale = global_normalizers([p["response_mask"] for p in parts])
    results = [grad_of(fn, p, loss_scale=scale) for p in parts]
    assert float(results[0][0] + results[1][0]) == pytest.approx(float(full[0]), rel=1e-6)
    torch.testing.assert_close(torch.cat([results[0][2], results[1][2]]), full[2], rtol=1e-6, atol=1e-12)
