"""Golden values, masking, host syncs and errors of ``default``, ``mix`` and ``none``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_entropy import DefaultEntropyLossFn, DummyEntropyLossFn, MixEntropyLossFn

from trinity_core.components import EntropyLossFn
from trinity_core.ops import LossScale

# Three rows; selected entropies: row 0 -> 1, 2; row 1 -> 3; row 2 -> 4, 5, 6.
H = [[1.0, 2.0, 9.0], [3.0, 9.0, 9.0], [4.0, 5.0, 6.0]]
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)
EXPERT = torch.tensor([False, True, False])


def _entropy(poison: bool = False) -> torch.Tensor:
    h = torch.tensor(H, dtype=torch.float64)
    if poison:
        h[0, 2], h[1, 1], h[1, 2] = math.nan, math.inf, -math.inf
    return h.requires_grad_()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 21 / 6),
        ("seq-mean-token-sum", (3 + 3 + 15) / 3),
        ("seq-mean-token-mean", (1.5 + 3 + 5) / 3),
    ],
)
def test_default_by_hand(mode: str, expected: float) -> None:
    h = _entropy()
    loss, metrics = DefaultEntropyLossFn(entropy_coef=0.1)(h, MASK, loss_agg_mode=mode)
    torch.testing.assert_close(loss, torch.tensor(0.1 * expected, dtype=torch.float64))
    torch.testing.assert_close(metrics["entropy_loss"], torch.tensor(expected, dtype=torch.float64))
    assert not metrics["entropy_loss"].requires_grad


def test_default_gradient_and_global_normalizer() -> None:
    h = _entropy()
    scale = LossScale(num_tokens=torch.tensor(12), num_sequences=torch.tensor(5))
    loss, _ = DefaultEntropyLossFn(entropy_coef=0.5)(h, MASK, loss_scale=scale)
    torch.testing.assert_close(loss, torch.tensor(0.5 * 21 / 12, dtype=torch.float64))
    loss.backward()
    assert h.grad is not None
    torch.testing.assert_close(h.grad, MASK.double() * 0.5 / 12)


def test_own_mode_wins_over_the_algorithms() -> None:
    fn = DefaultEntropyLossFn(entropy_coef=1.0, loss_agg_mode="seq-mean-token-sum")
    loss, _ = fn(_entropy(), MASK, loss_agg_mode="token-mean")
    torch.testing.assert_close(loss, torch.tensor(7.0, dtype=torch.float64))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 4 + 5 + 6) / 5),
        ("seq-mean-token-sum", (3 + 15) / 2),
        ("seq-mean-token-mean", (1.5 + 5) / 2),
    ],
)
def test_mix_drops_expert_rows_by_hand(mode: str, expected: float) -> None:
    h = _entropy()
    loss, metrics = MixEntropyLossFn(entropy_coef=2.0)(h, MASK, expert_mask=EXPERT, loss_agg_mode=mode)
    torch.testing.assert_close(loss, torch.tensor(2.0 * expected, dtype=torch.float64))
    torch.testing.assert_close(metrics["entropy_loss"], torch.tensor(expected, dtype=torch.float64))
    loss.backward()
    assert h.grad is not None
    assert bool((h.grad[1] == 0).all())


def test_mix_with_integer_expert_mask_and_all_expert_rows() -> None:
    fn = MixEntropyLossFn(entropy_coef=1.0)
    loss, _ = fn(_entropy(), MASK, expert_mask=EXPERT.long())
    torch.testing.assert_close(loss, torch.tensor(18 / 5, dtype=torch.float64))
    for mode in ("token-mean", "seq-mean-token-mean"):
        loss, _ = fn(_entropy(), MASK, expert_mask=torch.ones(3, dtype=torch.bool), loss_agg_mode=mode)
        assert loss.item() == 0.0


def test_mix_errors_say_what_to_pass() -> None:
    fn = MixEntropyLossFn(entropy_coef=1.0)
    with pytest.raises(ValueError, match="needs expert_mask"):
        fn(_entropy(), MASK)
    with pytest.raises(ValueError, match=r"one flag per row, shape \(3,\)"):
        fn(_entropy(), MASK, expert_mask=torch.zeros(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="one flag per row"):
        fn(_entropy(), MASK, expert_mask=torch.zeros(3, 1, dtype=torch.bool))


def test_none_is_a_graph_safe_zero() -> None:
    h = _entropy(poison=True)
    loss, metrics = DummyEntropyLossFn(entropy_coef=5.0)(h, MASK, loss_agg_mode="token-mean")
    assert metrics == {}
    assert loss.shape == ()
    assert loss.item() == 0.0
    assert loss.dtype == torch.float64
    assert loss.requires_grad
    loss.backward()
    assert h.grad is not None
    assert bool((h.grad == 0).all())
    # Without a graph it is a plain zero.
    plain, _ = DummyEntropyLossFn()(torch.ones(2, 2, dtype=torch.bfloat16), torch.ones(2, 2))
    assert plain.dtype == torch.bfloat16
    assert not plain.requires_grad


FNS: list[tuple[EntropyLossFn, dict[str, torch.Tensor]]] = [
    (DefaultEntropyLossFn(entropy_coef=0.3), {}),
    (MixEntropyLossFn(entropy_coef=0.3), {"expert_mask": EXPERT}),
    (DummyEntropyLossFn(entropy_coef=0.3), {}),
]


@pytest.mark.parametrize(("fn", "extra"), FNS, ids=["default", "mix", "none"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_garbage_at_masked_positions_never_leaks(
    fn: EntropyLossFn, extra: dict[str, torch.Tensor], mode: str
) -> None:
    clean, _ = fn(_entropy(), MASK, loss_agg_mode=mode, **extra)
    h = _entropy(poison=True)
    loss, metrics = fn(h, MASK, loss_agg_mode=mode, **extra)
    assert torch.equal(loss.detach(), clean.detach())
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    loss.backward()
    assert h.grad is not None
    assert bool(torch.isfinite(h.grad).all())
    assert bool((h.grad[~MASK] == 0).all())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.booleans(), min_size=12, max_size=12), st.lists(st.booleans(), min_size=3, max_size=3))
def test_random_masks_never_leak(bits: list[bool], expert_bits: list[bool]) -> None:
    mask = torch.tensor(bits).reshape(3, 4)
    h = torch.where(mask, torch.linspace(0.1, 3, 12).reshape(3, 4), math.nan).double().requires_grad_()
    loss, _ = MixEntropyLossFn(entropy_coef=1.0)(h, mask, expert_mask=torch.tensor(expert_bits))
    loss.backward()
    assert bool(torch.isfinite(loss))
    assert h.grad is not None
    assert bool(torch.isfinite(h.grad).all())


@pytest.mark.parametrize(("fn", "extra"), FNS, ids=["default", "mix", "none"])
def test_no_host_synchronisation(
    fn: EntropyLossFn, extra: dict[str, torch.Tensor], host_syncs: list[str]
) -> None:
    h = _entropy(poison=True)
    loss, _ = fn(h, MASK, loss_agg_mode="seq-mean-token-mean", **extra)
    loss.backward()
    assert host_syncs == []


def test_the_sync_counter_sees_syncs(host_syncs: list[str]) -> None:
    t = torch.tensor([1.0])
    t.item()
    bool(t)
    assert host_syncs == ["item", "__bool__"]
