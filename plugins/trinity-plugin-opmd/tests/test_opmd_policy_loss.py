"""The ``opmd`` policy loss: hand-derived values and gradient, masking, keys, micro-batch invariance."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_opmd import OPMDPolicyLossFn

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs

F64 = torch.float64


def inputs(seed: int, b: int = 4, t: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[:, 0] = True
    return {
        "logprob": -torch.rand(b, t, generator=g, dtype=F64) * 3,
        "action_mask": mask,
        "advantages": torch.randn(b, 1, generator=g, dtype=F64).expand(b, t).clone(),
    }


def test_defaults_and_keys() -> None:
    assert OPMDPolicyLossFn.default_args() == {"loss_agg_mode": "token-mean", "tau": 1.0}
    assert OPMDPolicyLossFn().select_keys == ["response_mask", "advantages"]
    assert OPMDPolicyLossFn(backend="tinker").select_keys == ["action_mask", "advantages"]
    with pytest.raises(pydantic.ValidationError):
        OPMDPolicyLossFn(tau=-0.5)


def test_token_mean_value_and_gradient() -> None:
    # Tokens (logp, A): (−1, 2), (−2, −1), masked (−9, 5). ℓ = −A·logp = 2, −2 -> mean 0; / (1 + τ) = 0.
    # Gradient: −A / ((1 + τ) · 2) = −2/4, 1/4, and 0 at the masked token. τ = 1.
    logp = torch.tensor([[-1.0, -2.0, -9.0]], dtype=F64, requires_grad=True)
    adv = torch.tensor([[2.0, -1.0, 5.0]], dtype=F64)
    mask = torch.tensor([[True, True, False]])
    loss, metrics = OPMDPolicyLossFn()(logp, response_mask=mask, advantages=adv)
    loss.backward()
    assert float(loss.detach()) == 0.0
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, 0.25, 0.0]], dtype=F64))
    assert metrics["opmd_loss"].dim() == 0
    assert not metrics["opmd_loss"].requires_grad


def test_tau_and_sequence_modes() -> None:
    # Row 0: ℓ = (1·1, 3·1) -> sum 4, mean 2; row 1: ℓ = (2) -> 2. τ = 3 divides by 4.
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -7.0]], dtype=F64)
    adv = torch.tensor([[1.0, 3.0], [1.0, 1.0]], dtype=F64)
    mask = torch.tensor([[True, True], [True, False]])
    fn = lambda mode: OPMDPolicyLossFn(tau=3.0, loss_agg_mode=mode)(  # noqa: E731
        logp, action_mask=mask, advantages=adv
    )[0]
    assert float(fn("token-mean")) == pytest.approx((1 + 3 + 2) / 3 / 4)
    assert float(fn("seq-mean-token-sum")) == pytest.approx((4 + 2) / 2 / 4)
    assert float(fn("seq-mean-token-mean")) == pytest.approx((2 + 2) / 2 / 4)


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf])
def test_garbage_at_masked_positions_reaches_neither_loss_nor_gradient(poison: float) -> None:
    x = inputs(0)
    grads, losses = [], []
    for planted in (False, True):
        lp, adv = x["logprob"].clone(), x["advantages"].clone()
        if planted:
            lp[~x["action_mask"]] = poison
            adv[~x["action_mask"]] = poison
        lp.requires_grad_(True)
        loss, _ = OPMDPolicyLossFn()(lp, response_mask=x["action_mask"], advantages=adv)
        loss.backward()
        losses.append(loss.detach())
        grads.append(lp.grad)
    assert torch.equal(losses[0], losses[1])
    assert torch.equal(grads[0], grads[1])


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    cut=st.integers(1, 5),
    mode=st.sampled_from(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]),
)
def test_micro_batches_with_global_normalizers_match_the_full_batch(seed: int, cut: int, mode: str) -> None:
    x = inputs(seed, b=6)
    fn = OPMDPolicyLossFn(tau=0.5, loss_agg_mode=mode)
    full_lp = x["logprob"].clone().requires_grad_(True)
    full, _ = fn(full_lp, response_mask=x["action_mask"], advantages=x["advantages"])
    full.backward()
    lp = x["logprob"].clone().requires_grad_(True)
    parts = [slice(0, cut), slice(cut, 6)]
    scale = global_normalizers([x["action_mask"][p] for p in parts])
    total = sum(
        fn(lp[p], response_mask=x["action_mask"][p], advantages=x["advantages"][p], loss_scale=scale)[0]
        for p in parts
    )
    total.backward()  # type: ignore[union-attr]
    torch.testing.assert_close(total, full, rtol=1e-6, atol=0)
    torch.testing.assert_close(lp.grad, full_lp.grad, rtol=1e-6, atol=1e-12)


def test_no_host_sync() -> None:
    x = inputs(1)
    with count_host_syncs() as log:
        OPMDPolicyLossFn()(x["logprob"], response_mask=x["action_mask"], advantages=x["advantages"])
    assert len(log) == 0, log.describe()
