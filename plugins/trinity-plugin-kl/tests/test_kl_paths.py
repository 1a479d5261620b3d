"""The loss and penalty paths of every registered KL function: golden values, masking, host syncs,
the adaptive coefficient, and ``none``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_kl import (
    AbsFn,
    AbsPlusFn,
    CorrectedK3Fn,
    DummyKLFn,
    K1Fn,
    K1PlusFn,
    K2Fn,
    K3Fn,
    K3PlusFn,
    LowVarKLFn,
    LowVarKLPlusFn,
)

from trinity_core.components import KLFn
from trinity_core.ops import LossScale

ESTIMATORS: list[type[KLFn]] = [
    K1Fn,
    K2Fn,
    K3Fn,
    LowVarKLFn,
    AbsFn,
    CorrectedK3Fn,
    K1PlusFn,
    AbsPlusFn,
    K3PlusFn,
    LowVarKLPlusFn,
]
ALL: list[type[KLFn]] = [DummyKLFn, *ESTIMATORS]

# Two rows; the selected tokens have logr = logp - ref = 1, -1 (row 0) and 2 (row 1).
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
LOGP = [[-1.0, -2.0, -0.5], [-1.0, -0.5, -0.5]]
REF = [[-2.0, -1.0, -0.5], [-3.0, -0.5, -0.5]]


def _batch(poison: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logp = torch.tensor(LOGP, dtype=torch.float64)
    ref = torch.tensor(REF, dtype=torch.float64)
    old = logp.clone()
    if poison:  # garbage exactly where the mask is 0
        logp[0, 2], ref[1, 1], old[1, 2], logp[1, 1] = math.nan, math.inf, -math.inf, -math.inf
    return logp.requires_grad_(), ref, old


def test_k2_loss_token_mean_by_hand() -> None:
    logp, ref, _ = _batch()
    loss, metrics = K2Fn(kl_coef=0.5).calculate_kl_loss(logp, ref, MASK)
    # k2 on the selected tokens: 0.5, 0.5, 2.0; token-mean = 3/3 = 1; loss = beta * 1.
    torch.testing.assert_close(loss, torch.tensor(0.5, dtype=torch.float64))
    torch.testing.assert_close(metrics["kl_loss"], torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(metrics["kl_coef"], torch.tensor(0.5, dtype=torch.float64))
    loss.backward()
    assert logp.grad is not None
    # d/dlogp = beta * logr / N_tok on selected tokens, 0 elsewhere.
    expected = torch.tensor([[1.0, -1.0, 0.0], [2.0, 0.0, 0.0]], dtype=torch.float64) * 0.5 / 3
    torch.testing.assert_close(logp.grad, expected)


def test_k1_loss_modes_by_hand() -> None:
    logp, ref, _ = _batch()
    fn = K1Fn(kl_coef=1.0)
    # k1 values: row 0 -> 1, -1 (sum 0, mean 0); row 1 -> 2.
    loss, _ = fn.calculate_kl_loss(logp, ref, MASK, loss_agg_mode="seq-mean-token-sum")
    torch.testing.assert_close(loss, torch.tensor(1.0, dtype=torch.float64))  # (0 + 2) / 2
    own = K1Fn(kl_coef=1.0, loss_agg_mode="token-mean")  # the component's own mode wins
    loss, _ = own.calculate_kl_loss(logp, ref, MASK, loss_agg_mode="seq-mean-token-sum")
    torch.testing.assert_close(loss, torch.tensor(2 / 3, dtype=torch.float64))
    scale = LossScale(num_tokens=torch.tensor(6), num_sequences=torch.tensor(4))
    loss, _metrics = fn.calculate_kl_loss(logp, ref, MASK, loss_scale=scale)
    torch.testing.assert_close(loss, torch.tensor(2 / 6, dtype=torch.float64))  # global token count


def test_penalty_by_hand() -> None:
    logp, ref, _ = _batch()
    scores = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float32)
    rewards, metrics = K1Fn(kl_coef=0.1).apply_kl_penalty_to_reward(scores, logp.detach(), ref, MASK)
    expected = torch.tensor([[-0.1, 0.1, 0.0], [-0.2, 0.0, 1.0]], dtype=torch.float32)
    torch.testing.assert_close(rewards, expected)
    assert rewards.dtype == torch.float32
    # kl = mean over rows of the masked row mean: (0 + 2) / 2 = 1.
    torch.testing.assert_close(metrics["kl"], torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(metrics["kl_coef"], torch.tensor(0.1, dtype=torch.float64))


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_penalty_without_reference_passes_scores_through(cls: type[KLFn]) -> None:
    logp, _, _ = _batch()
    scores = torch.rand(2, 3)
    rewards, metrics = cls().apply_kl_penalty_to_reward(scores, logp.detach(), None, MASK)
    assert rewards is scores
    assert metrics["kl"].item() == 0.0


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_garbage_at_masked_positions_reaches_neither_value_nor_gradient(cls: type[KLFn]) -> None:
    clean_logp, clean_ref, clean_old = _batch()
    logp, ref, old = _batch(poison=True)
    ref.requires_grad_()
    old.requires_grad_()
    fn = cls(kl_coef=1.0)
    loss, metrics = fn.calculate_kl_loss(logp, ref, MASK, old_logprob=old)
    clean_loss, _ = cls(kl_coef=1.0).calculate_kl_loss(clean_logp, clean_ref, MASK, old_logprob=clean_old)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, clean_loss, rtol=0, atol=0)
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    loss.backward()
    for leaf in (logp, ref, old):
        if leaf.grad is not None:
            assert bool(torch.isfinite(leaf.grad).all())
            assert bool((leaf.grad[~MASK] == 0).all())
    scores = torch.zeros(2, 3, dtype=torch.float64)
    rewards, metrics = cls().apply_kl_penalty_to_reward(scores, logp.detach(), ref.detach(), MASK)
    assert bool(torch.isfinite(rewards).all())
    assert bool((rewards[~MASK] == 0).all())
    assert all(bool(torch.isfinite(v)) for v in metrics.values())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.booleans(), min_size=12, max_size=12), st.sampled_from(ESTIMATORS))
def test_random_masks_never_leak(mask_bits: list[bool], cls: type[KLFn]) -> None:
    mask = torch.tensor(mask_bits).reshape(3, 4)
    logp = torch.where(mask, torch.linspace(-3, -0.1, 12).reshape(3, 4), math.nan).double()
    ref = torch.where(mask, torch.full((3, 4), -1.0), -math.inf).double()
    logp.requires_grad_()
    loss, _ = cls(kl_coef=1.0).calculate_kl_loss(logp, ref, mask, old_logprob=logp.detach())
    loss.backward()
    assert bool(torch.isfinite(loss))
    assert logp.grad is not None
    assert bool(torch.isfinite(logp.grad).all())


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_no_host_synchronisation(cls: type[KLFn], adaptive: bool, host_syncs: list[str]) -> None:
    args = {"adaptive": adaptive, "target_kl": 0.1, "horizon": 100.0} if adaptive else {}
    fn = cls(**args)
    logp, ref, old = _batch(poison=True)
    loss, _metrics = fn.calculate_kl_loss(
        logp, ref, MASK, old_logprob=old, loss_agg_mode="seq-mean-token-mean"
    )
    loss.backward()
    fn.apply_kl_penalty_to_reward(torch.zeros(2, 3), logp.detach(), ref, MASK)
    assert host_syncs == []


def test_adaptive_coefficient_from_the_penalty_path() -> None:
    # beta0 = 0.1, target 0.5, horizon 10; k1 per-row means 0 and 2 -> KL = 1; e = clip(1/0.5 - 1) = 0.2;
    # n = 2 rows: beta = 0.1 * (1 + 0.2 * 2 / 10) = 0.104.
    fn = K1Fn(adaptive=True, kl_coef=0.1, target_kl=0.5, horizon=10.0)
    logp, ref, _ = _batch()
    rewards, metrics = fn.apply_kl_penalty_to_reward(torch.zeros(2, 3), logp.detach(), ref, MASK)
    torch.testing.assert_close(metrics["kl_coef"], torch.tensor(0.104, dtype=torch.float64))  # post-update
    torch.testing.assert_close(fn.kl_coef, torch.tensor(0.104, dtype=torch.float64))
    # The rewards used the coefficient before the update: 0.1 * kl.
    torch.testing.assert_close(rewards[1, 0], torch.tensor(-0.2))
    # Second step: KL = 1 again -> 0.104 * 1.04.
    fn.apply_kl_penalty_to_reward(torch.zeros(2, 3), logp.detach(), ref, MASK)
    torch.testing.assert_close(fn.kl_coef, torch.tensor(0.104 * 1.04, dtype=torch.float64))


def test_adaptive_coefficient_from_the_loss_path() -> None:
    # k2 per-row means: row 0 (0.5 + 0.5) / 2 = 0.5, row 1 = 2.0; two micro-batches of the same data:
    # KL = (0.5 + 2 + 0.5 + 2) / 4 = 1.25 over n = 4 rows; target 2 -> e = clip(1.25/2 - 1) = -0.2;
    # beta = 0.1 * (1 - 0.2 * 4 / 10) = 0.092.
    fn = K2Fn(adaptive=True, kl_coef=0.1, target_kl=2.0, horizon=10.0)
    logp, ref, _ = _batch()
    for _ in range(2):
        _, metrics = fn.calculate_kl_loss(logp, ref, MASK)
        torch.testing.assert_close(metrics["kl_coef"], torch.tensor(0.1, dtype=torch.float64))
    new = fn.update_kl_coef()
    torch.testing.assert_close(new, torch.tensor(0.092, dtype=torch.float64))
    torch.testing.assert_close(fn.kl_coef, torch.tensor(0.092, dtype=torch.float64))
    # The observation was consumed: with no new data, KL = 0 over 0 rows leaves beta unchanged.
    torch.testing.assert_close(fn.update_kl_coef(), torch.tensor(0.092, dtype=torch.float64))
    # Explicit KL and batch size, as a trainer may pass: e = clip(3/2 - 1) = 0.2, n = 5.
    torch.testing.assert_close(
        fn.update_kl_coef(torch.tensor(3.0), 5), torch.tensor(0.092 * 1.1, dtype=torch.float64)
    )


def test_fixed_coefficient_never_changes() -> None:
    fn = K3Fn(kl_coef=0.3)
    logp, ref, _ = _batch()
    fn.apply_kl_penalty_to_reward(torch.zeros(2, 3), logp.detach(), ref, MASK)
    fn.calculate_kl_loss(logp, ref, MASK)
    assert fn.update_kl_coef().item() == pytest.approx(0.3)


def test_none_is_a_graph_safe_zero() -> None:
    logp, ref, _ = _batch(poison=True)
    fn = DummyKLFn(kl_coef=0.5)
    loss, metrics = fn.calculate_kl_loss(logp, ref, MASK)
    assert metrics == {}
    assert loss.shape == ()
    assert loss.item() == 0.0
    assert loss.dtype == torch.float64
    assert loss.requires_grad
    loss.backward()
    assert logp.grad is not None
    assert bool((logp.grad == 0).all())
    scores = torch.rand(2, 3)
    rewards, metrics = fn.apply_kl_penalty_to_reward(scores, logp.detach(), ref, MASK)
    assert rewards is scores
    assert metrics == {}
    assert torch.equal(fn.calculate_kl(logp, ref), torch.zeros(2, 3, dtype=torch.float64))


def test_the_sync_counter_sees_syncs(host_syncs: list[str]) -> None:
    t = torch.tensor([1.0])
    t.item()
    bool(t)
    t.tolist()
    assert host_syncs == ["item", "__bool__", "tolist"]
