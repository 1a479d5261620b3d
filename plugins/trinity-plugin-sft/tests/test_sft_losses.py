"""The sft, sft_is and sft_phi losses: golden values, gradients, masking, host syncs, micro-batching."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sft_support import MODES, loss_and_grad, random_inputs
from trinity_plugin_sft import SFTISLossFn, SFTLossFn, SFTPhiLossFn, phi_function

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs

LOSSES = (SFTLossFn, SFTISLossFn, SFTPhiLossFn)

# One row of three tokens (the third padded) and one row of one token: N = 3 selected tokens.
PROBS = [[0.8, 0.25, 0.5], [0.5, 0.9, 0.9]]
MASK = torch.tensor([[True, True, False], [True, False, False]])


def golden_logprob() -> torch.Tensor:
    return torch.log(torch.tensor(PROBS, dtype=torch.float64))


def test_defaults_keys_and_argument_validation() -> None:
    for cls in LOSSES:
        assert cls().select_keys == ["response_mask"]
        assert cls(backend="tinker").select_keys == ["action_mask"]
    assert SFTLossFn.default_args() == {"loss_agg_mode": "token-mean"}
    assert SFTISLossFn.default_args() == {"loss_agg_mode": "token-mean"}
    assert SFTPhiLossFn.default_args() == {"loss_agg_mode": "token-mean", "cutoff_prob": 1.0}
    for bad in (-0.01, 1.01):
        with pytest.raises(pydantic.ValidationError, match="cutoff_prob"):
            SFTPhiLossFn(cutoff_prob=bad)
    for edge in (0.0, 1.0):
        assert SFTPhiLossFn(cutoff_prob=edge).cutoff_prob == edge


def test_sft_golden_values() -> None:
    # L = (−log .8 − log .25 − log .5) / 3; ∂L/∂log p = −1/3 on selected tokens.
    loss, metrics, grad = loss_and_grad(SFTLossFn(), golden_logprob(), action_mask=MASK)
    expected = -(math.log(0.8) + math.log(0.25) + math.log(0.5)) / 3
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    assert float(metrics["sft_loss"]) == pytest.approx(expected, rel=1e-12)
    torch.testing.assert_close(grad, torch.where(MASK, -1 / 3, 0.0).double())


def test_sft_is_golden_values() -> None:
    # ℓ = −log p · p; ∂ℓ/∂log p = −p (the weight is stop-gradient).
    loss, metrics, grad = loss_and_grad(SFTISLossFn(), golden_logprob(), action_mask=MASK)
    expected = -(0.8 * math.log(0.8) + 0.25 * math.log(0.25) + 0.5 * math.log(0.5)) / 3
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    assert float(metrics["sft_is_loss"]) == pytest.approx(expected, rel=1e-12)
    weights = torch.tensor(PROBS, dtype=torch.float64)
    torch.testing.assert_close(grad, torch.where(MASK, -weights / 3, 0.0))


def test_sft_phi_golden_values_with_cutoff() -> None:
    # c = 0.5: p = .8 is cut off (constant −log .5 · φ(.8), no gradient); p = .25 and p = .5 are kept.
    loss, metrics, grad = loss_and_grad(SFTPhiLossFn(cutoff_prob=0.5), golden_logprob(), action_mask=MASK)
    phi = {p: p * (1 - p) for p in (0.8, 0.25, 0.5)}
    expected = (-math.log(0.5) * phi[0.8] - math.log(0.25) * phi[0.25] - math.log(0.5) * phi[0.5]) / 3
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    assert float(metrics["sft_phi_loss"]) == pytest.approx(expected, rel=1e-12)
    assert float(metrics["cutoff_frac"]) == pytest.approx(1 / 3)
    want = torch.tensor([[0.0, -phi[0.25] / 3, 0.0], [-phi[0.5] / 3, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad, want)


def test_sft_phi_without_cutoff_and_with_zero_cutoff() -> None:
    loss, _, grad = loss_and_grad(SFTPhiLossFn(), golden_logprob(), action_mask=MASK)
    phis = [0.8 * 0.2, 0.25 * 0.75, 0.5 * 0.5]
    logs = [math.log(0.8), math.log(0.25), math.log(0.5)]
    assert float(loss) == pytest.approx(-sum(p * lg for p, lg in zip(phis, logs, strict=True)) / 3)
    torch.testing.assert_close(grad[MASK], -torch.tensor(phis, dtype=torch.float64) / 3)
    # Zero cut-off: every token is above it; exactly zero loss and gradient (the reference gives +inf).
    loss, metrics, grad = loss_and_grad(SFTPhiLossFn(cutoff_prob=0.0), golden_logprob(), action_mask=MASK)
    assert float(loss) == 0.0
    assert bool((grad == 0).all())
    assert float(metrics["cutoff_frac"]) == 1.0


def test_phi_function() -> None:
    p = torch.tensor([0.0, 0.25, 0.5, 1.0])
    torch.testing.assert_close(phi_function(p), torch.tensor([0.0, 0.1875, 0.25, 0.0]))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(MODES),
    cutoff=st.floats(0.05, 1.0),
    which=st.sampled_from(LOSSES),
)
def test_autograd_equals_the_analytic_gradient(seed: int, mode: str, cutoff: float, which: type) -> None:
    x = random_inputs(seed)
    fn = which(loss_agg_mode=mode, cutoff_prob=cutoff) if which is SFTPhiLossFn else which(loss_agg_mode=mode)
    _, _, grad = loss_and_grad(fn, x["logprob"], action_mask=x["action_mask"])
    mask, p = x["action_mask"], x["logprob"].exp()
    if which is SFTLossFn:
        weight = torch.ones_like(p)
    elif which is SFTISLossFn:
        weight = p
    else:
        weight = p * (1 - p) * (p <= cutoff)
    counts = mask.sum(-1, keepdim=True).double()
    if mode == "token-mean":
        denom = mask.sum().double().expand_as(counts)
    elif mode == "seq-mean-token-sum":
        denom = torch.full_like(counts, float(mask.shape[0]))
    else:
        denom = counts * mask.shape[0]
    torch.testing.assert_close(grad, torch.where(mask, -weight / denom, 0.0), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("cls", LOSSES)
def test_nan_and_inf_at_masked_positions_leak_nowhere(cls: type) -> None:
    x = random_inputs(3)
    mask = x["action_mask"]
    dirty = x["logprob"].clone()
    poison = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64)
    dirty[~mask] = poison.repeat(int((~mask).sum()))[: int((~mask).sum())]
    fn = cls(cutoff_prob=0.3) if cls is SFTPhiLossFn else cls()
    clean_loss, clean_metrics, clean_grad = loss_and_grad(fn, x["logprob"], action_mask=mask)
    dirty_loss, dirty_metrics, dirty_grad = loss_and_grad(fn, dirty, action_mask=mask)
    assert torch.equal(clean_loss, dirty_loss)
    assert torch.equal(clean_grad, dirty_grad)
    assert bool((dirty_grad[~mask] == 0).all())
    for key, value in clean_metrics.items():
        assert torch.equal(value, dirty_metrics[key]), key


@pytest.mark.parametrize("cls", LOSSES)
def test_no_host_sync_and_detached_metrics(cls: type) -> None:
    x = random_inputs(4)
    fn = cls()
    leaf = x["logprob"].clone().requires_grad_(True)
    with count_host_syncs() as log:
        loss, metrics = fn(log_prob=leaf, response_mask=x["action_mask"].float())
        loss.backward()
    assert len(log) == 0, log.describe()
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())


@pytest.mark.parametrize("cls", LOSSES)
@pytest.mark.parametrize("mode", [*MODES, "seq-mean-token-sum-norm"])
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(cls: type, mode: str) -> None:
    x = random_inputs(5, b=6, t=8)
    x["action_mask"][2] = False  # a fully masked row counts as no sequence
    fn = cls(loss_agg_mode=mode)
    mask = x["action_mask"]
    full_loss, _, full_grad = loss_and_grad(
        fn, x["logprob"], action_mask=mask, loss_scale=global_normalizers(mask, max_tokens=8)
    )
    parts = [slice(0, 1), slice(1, 4), slice(4, 6)]
    scale = global_normalizers([mask[p] for p in parts], max_tokens=8)
    leaf = x["logprob"].clone().requires_grad_(True)
    total = sum(fn(leaf[p], action_mask=mask[p], loss_scale=scale)[0] for p in parts)
    total.backward()
    torch.testing.assert_close(total.detach(), full_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(leaf.grad, full_grad, rtol=1e-12, atol=1e-14)


def test_low_precision_logprob_keeps_its_dtype_and_gets_a_gradient() -> None:
    leaf = torch.full((2, 3), -0.5, dtype=torch.bfloat16, requires_grad=True)
    loss, _ = SFTLossFn()(leaf, action_mask=torch.ones(2, 3))
    loss.backward()
    assert loss.dtype == torch.bfloat16
    assert float(loss.detach()) == pytest.approx(0.5)
    assert leaf.grad is not None
    assert leaf.grad.dtype == torch.bfloat16
