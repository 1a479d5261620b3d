"""Agreement with the published reference (trinity-rft 0.6.0, ``trinity.algorithm.kl_fn.kl_fn``).

Where this plugin deliberately differs, the difference itself is tested:

* ``corrected_k3``: same values; the reference back-propagates through the importance ratio, here it
  is detached (reference-differences.md#kl-terms), so the gradients differ by exactly ``k3 · ∂w/∂logp``.
* ``k3``/``low_var_kl`` use ``expm1(u) − u`` instead of ``exp(u) − 1 − u`` (no cancellation), so values
  agree to rounding, not bit for bit.
* penalty metrics: ``kl_coef`` is the coefficient after the update (the reference reports the one before),
  and metrics are tensors (the reference calls ``.item()``).
* straight-through ``X+`` estimators are not in the reference (verl names).
* adaptive penalty: the reference's ``apply_kl_penalty_to_reward`` raises ``TypeError`` (it calls
  ``torch.clip`` on a Python float) after writing the rewards; its ``update_kl_coef`` works when given
  a tensor, which is what the test compares against.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import torch
from trinity_plugin_kl import (
    AbsFn,
    CorrectedK3Fn,
    DummyKLFn,
    K1Fn,
    K2Fn,
    K3Fn,
    LowVarKLFn,
)

from trinity_core.components import KLFn

pytestmark = pytest.mark.reference

# Our class -> reference class name (the same names).
PAIRS: list[tuple[type[KLFn], str]] = [
    (K1Fn, "K1Fn"),
    (K2Fn, "K2Fn"),
    (K3Fn, "K3Fn"),
    (LowVarKLFn, "LowVarKLFn"),
    (AbsFn, "AbsFn"),
    (CorrectedK3Fn, "CorrectedK3Fn"),
]
MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]


def _random(seed: int, shape: tuple[int, int] = (6, 9)) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(shape, generator=g, dtype=torch.float64) * 4
    ref = logp + torch.randn(shape, generator=g, dtype=torch.float64) * 1.5  # |u| up to ~6: clamps bind
    old = logp + torch.randn(shape, generator=g, dtype=torch.float64) * 0.5
    mask = torch.rand(shape, generator=g) < 0.7
    mask[:, 0] = True  # every row non-empty: the reference counts empty rows in seq-mean modes
    return {"logp": logp, "ref": ref, "old": old, "mask": mask}


def _grad(fn: Any, logp: torch.Tensor, ref: torch.Tensor, old: torch.Tensor) -> tuple[torch.Tensor, ...]:
    leaves = [t.clone().requires_grad_() for t in (logp, ref, old)]
    kl = fn.calculate_kl(*leaves)
    kl.sum().backward()
    return (kl.detach(), *(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves))


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=[p[1] for p in PAIRS])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_token_values_and_gradients(ref_kl: ModuleType, ours: type[KLFn], theirs: str, seed: int) -> None:
    data = _random(seed)
    mine = _grad(ours(), data["logp"], data["ref"], data["old"])
    published = _grad(getattr(ref_kl, theirs)(), data["logp"], data["ref"], data["old"])
    torch.testing.assert_close(mine[0], published[0], rtol=1e-12, atol=1e-12)
    if ours is CorrectedK3Fn:
        # Reference: d/dlogp (w · k3) = w · dk3 + k3 · dw, dw/dlogp = w inside the clamp, 0 outside;
        # d/dold = -k3 · dw/dlogp. Ours keeps only w · dk3.
        w_raw = (data["logp"] - data["old"]).exp()
        dw = torch.where(w_raw < 2.0, w_raw, 0.0)
        k3 = K3Fn().calculate_kl(data["logp"], data["ref"])
        torch.testing.assert_close(published[1] - mine[1], k3 * dw, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(published[3], -k3 * dw, rtol=1e-10, atol=1e-12)
        assert bool((mine[3] == 0).all())
    else:
        for a, b in zip(mine[1:], published[1:], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=[p[1] for p in PAIRS])
@pytest.mark.parametrize("mode", MODES)
def test_kl_loss(ref_kl: ModuleType, ours: type[KLFn], theirs: str, mode: str) -> None:
    data = _random(7)
    loss, metrics = ours(kl_coef=0.3).calculate_kl_loss(
        data["logp"], data["ref"], data["mask"], loss_agg_mode=mode, old_logprob=data["old"]
    )
    ref_loss, ref_metrics = getattr(ref_kl, theirs)(kl_coef=0.3).calculate_kl_loss(
        data["logp"], data["ref"], data["mask"], mode, old_logprob=data["old"]
    )
    # The reference's masked_mean adds 1e-8 to the count: agreement to ~1e-9 relative.
    torch.testing.assert_close(loss, ref_loss, rtol=1e-8, atol=1e-12)
    assert metrics["kl_loss"].item() == pytest.approx(ref_metrics["kl_loss"], rel=1e-8)
    assert metrics["kl_coef"].item() == pytest.approx(ref_metrics["kl_coef"])


class _Batch(dict[str, torch.Tensor]):
    """Just enough of verl's DataProto.batch (a TensorDict) for the reference penalty."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        super().__init__(tensors)
        self.batch_size = (tensors["responses"].shape[0],)


class _Proto:
    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.batch = _Batch(tensors)


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=[p[1] for p in PAIRS])
@pytest.mark.parametrize("adaptive", [False, True])
def test_kl_penalty(ref_kl: ModuleType, ours: type[KLFn], theirs: str, adaptive: bool) -> None:
    data = _random(11)
    args: dict[str, Any] = {"kl_coef": 0.2}
    if adaptive:
        args.update(adaptive=True, target_kl=0.3, horizon=20.0)
    scores = torch.randn(data["mask"].shape, generator=torch.Generator().manual_seed(3))
    fn = ours(**args)
    rewards, metrics = fn.apply_kl_penalty_to_reward(scores, data["old"], data["ref"], data["mask"])
    mask = data["mask"].float()
    proto = _Proto(
        {
            "responses": torch.zeros(mask.shape, dtype=torch.long),
            "attention_mask": torch.ones(mask.shape[0], mask.shape[1] + 2),
            "response_mask": mask,
            "token_level_scores": scores,
            "old_log_probs": data["old"],
            "ref_log_prob": data["ref"],
        }
    )
    published = getattr(ref_kl, theirs)(**args)
    if adaptive:
        with pytest.raises(TypeError, match="clip"):
            published.apply_kl_penalty_to_reward(proto)
        ref_kl_value = ref_kl.masked_mean(
            (published.calculate_kl(data["old"], data["ref"]) * mask), mask, axis=-1
        ).mean()
        published.update_kl_coef(ref_kl_value, mask.shape[0])
    else:
        _, ref_metrics = published.apply_kl_penalty_to_reward(proto)
        ref_kl_value = torch.tensor(ref_metrics["kl"])
        # Documented difference: the reference reports the coefficient before the update.
        assert ref_metrics["kl_coef"] == pytest.approx(0.2)
    ref_rewards = proto.batch["token_level_rewards"]
    torch.testing.assert_close(rewards, ref_rewards.to(rewards.dtype), rtol=1e-6, atol=1e-7)
    assert metrics["kl"].item() == pytest.approx(ref_kl_value.item(), rel=1e-7)
    assert metrics["kl_coef"].item() == pytest.approx(float(published.kl_coef), rel=1e-7)
    assert fn.kl_coef.item() == pytest.approx(float(published.kl_coef), rel=1e-7)
    if adaptive:
        assert fn.kl_coef.item() != pytest.approx(0.2)  # the update did happen


def test_none(ref_kl: ModuleType) -> None:
    data = _random(5)
    loss, metrics = DummyKLFn().calculate_kl_loss(data["logp"], data["ref"], data["mask"])
    ref_loss, ref_metrics = ref_kl.DummyKLFn().calculate_kl_loss(
        data["logp"], data["ref"], data["mask"], "token-mean"
    )
    assert loss.item() == ref_loss.item() == 0.0
    assert metrics == ref_metrics == {}
    assert torch.equal(
        DummyKLFn().calculate_kl(data["logp"], data["ref"]),
        ref_kl.DummyKLFn().calculate_kl(data["logp"], data["ref"]),
    )


def test_default_args_extend_the_reference(ref_kl: ModuleType) -> None:
    ours = K2Fn.default_args()
    for key, value in ref_kl.K2Fn.default_args().items():
        assert ours[key] == value
    assert set(ours) - set(ref_kl.K2Fn.default_args()) == {"target_kl", "horizon", "loss_agg_mode"}


def test_reference_k3_cancels_in_float32(ref_kl: ModuleType) -> None:
    # The documented numerical difference: at u = ref - logp = 1e-4 the reference's exp(u) - 1 - u
    # is 232% off in float32; ours is within 0.3% of the float64 value.
    logp = torch.tensor([-1e-4], dtype=torch.float32)
    ref = torch.zeros(1, dtype=torch.float32)
    exact = 0.5e-8  # u^2 / 2 + u^3 / 6 ≈ 5.0002e-9
    assert abs(ref_kl.K3Fn().calculate_kl(logp, ref).item() - exact) > exact
    assert K3Fn().calculate_kl(logp, ref).item() == pytest.approx(exact, rel=3e-3)
