"""corrected_k3 = sg(clamp(exp(logp − old), 0, 2)) · k3: golden values and the detached ratio's gradient."""

from __future__ import annotations

import math

import torch
from trinity_plugin_kl import CorrectedK3Fn, K3Fn

E = math.e


def _leaves(*values: list[float]) -> list[torch.Tensor]:
    return [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]


def test_value_and_gradient_by_hand() -> None:
    # logp = -1, ref = -2 -> u = -1, k3 = e^-1, dk3/dlogp = 1 - e^-1.
    # old = -1.5 -> w = e^0.5 (inside [0, 2]); old = -3 -> w = e^2 clamped to 2; old = -1 -> w = 1.
    logp, ref, old = _leaves([-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0], [-1.5, -3.0, -1.0])
    kl = CorrectedK3Fn().calculate_kl(logp, ref, old)
    weights = torch.tensor([math.exp(0.5), 2.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(kl, weights / E, rtol=1e-12, atol=0)
    kl.sum().backward()
    assert logp.grad is not None
    assert ref.grad is not None
    # Detached weight: d/dlogp = w (1 - e^u), no k3 · dw/dlogp term; d/dold = 0 (no gradient path).
    torch.testing.assert_close(logp.grad, weights * (1 - 1 / E), rtol=1e-12, atol=0)
    torch.testing.assert_close(ref.grad, -weights * (1 - 1 / E), rtol=1e-12, atol=0)
    assert old.grad is None


def test_without_old_logprob_it_is_k3() -> None:
    logp = torch.tensor([-1.0, -0.3, -7.0], dtype=torch.float64)
    ref = torch.tensor([-2.0, -0.1, -1.0], dtype=torch.float64)
    assert torch.equal(CorrectedK3Fn().calculate_kl(logp, ref), K3Fn().calculate_kl(logp, ref))


def test_overflowing_ratio_is_clamped_not_nan() -> None:
    logp = torch.tensor([0.0], dtype=torch.float32)
    ref = torch.tensor([-1.0], dtype=torch.float32)
    old = torch.tensor([-200.0], dtype=torch.float32)  # exp(200) = inf in float32
    kl = CorrectedK3Fn().calculate_kl(logp, ref, old)
    torch.testing.assert_close(kl, torch.tensor([2 * (math.exp(-1) - 1 + 1)], dtype=torch.float32))


def test_loss_path_passes_old_logprob_and_penalty_path_does_not() -> None:
    fn = CorrectedK3Fn(kl_coef=1.0)
    logp = torch.tensor([[-1.0]], dtype=torch.float64)
    ref = torch.tensor([[-2.0]], dtype=torch.float64)
    old = torch.tensor([[-1.5]], dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)
    loss, _ = fn.calculate_kl_loss(logp, ref, mask, old_logprob=old)
    torch.testing.assert_close(loss, torch.tensor(math.exp(0.5) / E, dtype=torch.float64))
    rewards, _ = fn.apply_kl_penalty_to_reward(torch.zeros(1, 1, dtype=torch.float64), logp, ref, mask)
    torch.testing.assert_close(rewards, torch.tensor([[-1 / E]], dtype=torch.float64))
