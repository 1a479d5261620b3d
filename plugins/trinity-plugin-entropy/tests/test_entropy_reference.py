"""Agreement with the published reference (``trinity.algorithm.entropy_loss_fn.entropy_loss_fn``).

Differences, each tested: metrics are 0-d tensors (the reference calls ``.item()``); ``mix`` on an
all-expert batch gives 0 where the reference's ``seq-mean-*`` modes give NaN; ``none`` returns its zero
on the input's device and graph (the reference: a new CPU ``tensor(0.0)``).
"""

from __future__ import annotations

import math
from types import ModuleType

import pytest
import torch
from trinity_plugin_entropy import DefaultEntropyLossFn, DummyEntropyLossFn, MixEntropyLossFn

pytestmark = pytest.mark.reference

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]


def _random(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h = torch.rand(8, 11, generator=g, dtype=torch.float64) * 3
    mask = torch.rand(8, 11, generator=g) < 0.6
    mask[:, 0] = True  # non-empty rows: the reference counts empty rows in seq-mean modes
    expert = torch.rand(8, generator=g) < 0.4
    expert[0] = False
    return h, mask, expert


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [0, 1])
def test_default(ref_entropy: ModuleType, mode: str, seed: int) -> None:
    h, mask, _ = _random(seed)
    loss, metrics = DefaultEntropyLossFn(entropy_coef=0.7)(h, mask, loss_agg_mode=mode)
    ref_loss, ref_metrics = ref_entropy.DefaultEntropyLossFn(0.7)(h, mask, loss_agg_mode=mode)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-8, atol=0)
    assert metrics["entropy_loss"].item() == pytest.approx(ref_metrics["entropy_loss"], rel=1e-8)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mix(ref_entropy: ModuleType, mode: str, seed: int) -> None:
    h, mask, expert = _random(seed)
    loss, metrics = MixEntropyLossFn(entropy_coef=0.7)(h, mask, expert_mask=expert, loss_agg_mode=mode)
    ref_loss, ref_metrics = ref_entropy.MixEntropyLossFn(0.7)(h, mask, expert_mask=expert, loss_agg_mode=mode)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-8, atol=0)
    assert metrics["entropy_loss"].item() == pytest.approx(ref_metrics["entropy_loss"], rel=1e-8)


def test_mix_all_expert_differs_documented(ref_entropy: ModuleType) -> None:
    h, mask, _ = _random(0)
    expert = torch.ones(8, dtype=torch.bool)
    ref_loss, _ = ref_entropy.MixEntropyLossFn(1.0)(
        h, mask, expert_mask=expert, loss_agg_mode="seq-mean-token-mean"
    )
    assert math.isnan(ref_loss.item())
    loss, _ = MixEntropyLossFn(entropy_coef=1.0)(
        h, mask, expert_mask=expert, loss_agg_mode="seq-mean-token-mean"
    )
    assert loss.item() == 0.0


def test_mix_missing_expert_mask_is_an_error_in_both(ref_entropy: ModuleType) -> None:
    h, mask, _ = _random(0)
    with pytest.raises(ValueError, match="expert_mask"):
        ref_entropy.MixEntropyLossFn(1.0)(h, mask)
    with pytest.raises(ValueError, match="expert_mask"):
        MixEntropyLossFn(entropy_coef=1.0)(h, mask)


def test_none(ref_entropy: ModuleType) -> None:
    h, mask, _ = _random(0)
    loss, metrics = DummyEntropyLossFn(entropy_coef=0.7)(h, mask)
    ref_loss, ref_metrics = ref_entropy.DummyEntropyLossFn(0.7)(h, mask)
    assert loss.item() == ref_loss.item() == 0.0
    assert metrics == ref_metrics == {}


def test_default_args_match(ref_entropy: ModuleType) -> None:
    for ours, theirs in (
        (DefaultEntropyLossFn, ref_entropy.DefaultEntropyLossFn),
        (MixEntropyLossFn, ref_entropy.MixEntropyLossFn),
        (DummyEntropyLossFn, ref_entropy.DummyEntropyLossFn),
    ):
        mine = ours.default_args()
        assert mine["entropy_coef"] == theirs.default_args()["entropy_coef"]
        assert set(mine) == {"entropy_coef", "loss_agg_mode"}
