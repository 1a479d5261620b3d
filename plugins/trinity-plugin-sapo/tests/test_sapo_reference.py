"""Comparison with the published reference ``trinity.algorithm.policy_loss_fn.sapo_policy_loss``: the gate
and the monitoring metrics agree by construction; the gradient differs as documented
(reference-differences.md#sapo-weight)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_sapo import SAPOPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_loss(**args: float) -> object:
    module = import_reference("trinity.algorithm.policy_loss_fn.sapo_policy_loss")
    return module.SAPOPolicyLossFn(**args)


def inputs(seed: int, b: int = 4, t: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    return {
        "logprob": old + 0.5 * torch.randn(b, t, generator=g, dtype=torch.float64),
        "old_logprob": old,
        "action_mask": torch.rand(b, t, generator=g) > 0.3,
        "advantages": torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t),
    }


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), tau_pos=st.floats(0.3, 3.0), extra=st.floats(0.0, 1.0))
def test_gate_and_metrics_agree_with_the_reference(seed: int, tau_pos: float, extra: float) -> None:
    args = {"tau_pos": tau_pos, "tau_neg": tau_pos + extra}
    ours, theirs = SAPOPolicyLossFn(**args), reference_loss(**args)
    x = inputs(seed)
    ratio = torch.exp(x["logprob"] - x["old_logprob"])
    torch.testing.assert_close(
        ours.soft_gate_function(ratio, x["advantages"]), theirs.soft_gate_function(ratio, x["advantages"])
    )
    _, our_metrics = ours(
        x["logprob"], old_logprob=x["old_logprob"], action_mask=x["action_mask"], advantages=x["advantages"]
    )
    _, their_metrics = theirs(
        x["logprob"], old_logprob=x["old_logprob"], action_mask=x["action_mask"], advantages=x["advantages"]
    )
    for key in ("ppo_kl", "avg_soft_gate", "avg_ratio", "pos_adv_frac"):
        assert float(our_metrics[key]) == pytest.approx(their_metrics[key], rel=1e-6, abs=1e-9), key


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradient_differs_from_the_reference_as_documented(seed: int) -> None:
    # Reference: L = agg(−A · sg(f(r)) · logπ) -> ∂L/∂logπ = −A · f(r) / N   (weight f, monotone, 2/τ at r=1)
    # Ours:      L = agg(−A · f(r))           -> ∂L/∂logπ = −A · f'(r)·r / N (weight bell-shaped, 1 at r=1)
    x = inputs(seed)
    ours, theirs = SAPOPolicyLossFn(), reference_loss()
    grads = []
    for fn in (ours, theirs):
        lp = x["logprob"].clone().requires_grad_(True)
        loss, _ = fn(
            lp, old_logprob=x["old_logprob"], action_mask=x["action_mask"], advantages=x["advantages"]
        )
        loss.backward()
        grads.append(lp.grad)
    ratio = torch.exp(x["logprob"] - x["old_logprob"])
    mask, adv = x["action_mask"], x["advantages"]
    n = mask.sum().double()
    gate = ours.soft_gate_function(ratio, adv)
    weight = ours.gradient_weight(ratio, adv)
    torch.testing.assert_close(grads[0], torch.where(mask, -adv * weight / n, 0.0))
    torch.testing.assert_close(grads[1], torch.where(mask, -adv * gate / n, 0.0), rtol=1e-6, atol=1e-9)
    assert not torch.allclose(grads[0], grads[1])


@pytest.mark.parametrize("tau", [1.0, 1.05, 2.0])
def test_on_policy_the_reference_step_is_two_over_tau_times_ours(tau: float) -> None:
    lp = torch.full((1, 4), -0.7, dtype=torch.float64)
    kwargs = {
        "old_logprob": lp.clone(),
        "action_mask": torch.ones(1, 4, dtype=torch.bool),
        "advantages": torch.tensor([[1.0, -1.0, 2.0, -2.0]], dtype=torch.float64),
    }
    grads = []
    for fn in (SAPOPolicyLossFn(tau_pos=tau, tau_neg=tau), reference_loss(tau_pos=tau, tau_neg=tau)):
        x = lp.clone().requires_grad_(True)
        loss, _ = fn(x, **kwargs)
        loss.backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], -kwargs["advantages"] / 4)  # plain policy gradient at r = 1
    torch.testing.assert_close(grads[1], grads[0] * (2 / tau))
