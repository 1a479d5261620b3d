"""``SAPOPolicyLossFn(fused=True)`` against the default path (plain torch, autograd): the compiled kernel
agrees to 1e-6 relative on loss, gradient and metrics without host syncs; property tests over random
shapes, masks, temperatures, modes and dtypes hold the fused path equal to the plain one in value and
gradient (tolerances below)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_sapo import SAPOPolicyLossFn
from trinity_plugin_sapo._kernel import SAPO_KERNEL

from trinity_core.ops import aggregate_loss, global_normalizers
from trinity_core.testing.host_syncs import count_host_syncs


def inputs(seed: int, b: int = 8, t: int = 48) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    return {
        "log_prob": old + 0.5 * torch.randn(b, t, generator=g),
        "old_log_probs": old,
        "response_mask": torch.arange(t)[None, :] < lengths[:, None],
        "advantages": torch.randn(b, 1, generator=g).expand(b, t),
    }


def run(
    fn: SAPOPolicyLossFn, x: dict[str, torch.Tensor], **extra: object
) -> tuple[torch.Tensor, dict, torch.Tensor]:
    lp = x["log_prob"].clone().requires_grad_(True)
    loss, metrics = fn(lp, **{k: v for k, v in x.items() if k != "log_prob"}, **extra)
    loss.backward()
    assert lp.grad is not None
    return loss.detach(), metrics, lp.grad


def test_fused_agrees_with_eager_without_host_syncs() -> None:
    x = inputs(0)
    for mode in ("token-mean", "seq-mean-token-mean"):
        eager = run(SAPOPolicyLossFn(loss_agg_mode=mode), x)  # type: ignore[arg-type]
        fused_fn = SAPOPolicyLossFn(loss_agg_mode=mode, fused=True)  # type: ignore[arg-type]
        fused = run(fused_fn, x)
        torch.testing.assert_close(fused[0], eager[0], rtol=1e-6, atol=0)
        torch.testing.assert_close(fused[2], eager[2], rtol=1e-6, atol=1e-9)
        assert fused[1].keys() == eager[1].keys()
        for key in eager[1]:
            torch.testing.assert_close(fused[1][key], eager[1][key], rtol=1e-6, atol=1e-7)
        with count_host_syncs() as log:
            run(fused_fn, x)
        assert len(log) == 0, log.describe()


def test_fused_and_eager_agree_on_dirty_inputs_dtypes_and_global_normalizers() -> None:
    # NaN / inf at masked positions, a float mask, (B, 1) advantages, float64, and the trainer's
    # loss_scale: both paths give the same loss, gradient and metrics, and NaN reaches none of them.
    from trinity_core.ops import global_normalizers

    g = torch.Generator().manual_seed(3)
    b, t = 5, 37
    old = -3.0 * torch.rand(b, t, generator=g, dtype=torch.float64)
    logprob = old + 0.7 * torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) < 0.6
    mask[1] = False
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64)
    logprob[~mask] = float("nan")
    old[~mask] = float("inf")
    logprob[0, 0], mask[0, 0] = 40.0, True  # far outside the ratio clamp
    scale = global_normalizers([mask, mask[:2]], max_tokens=t)
    for mode in ("seq-mean-token-sum-norm", "seq-mean-token-mean"):
        results = []
        for fused in (False, True):
            fn = SAPOPolicyLossFn(loss_agg_mode=mode, fused=fused)  # type: ignore[arg-type]
            lp = logprob.clone().requires_grad_(True)
            loss, metrics = fn(
                lp, old_logprob=old, action_mask=mask.double(), advantages=adv, loss_scale=scale
            )
            loss.backward()
            assert lp.grad is not None
            results.append((loss.detach(), metrics, lp.grad))
        (loss_e, metrics_e, grad_e), (loss_f, metrics_f, grad_f) = results
        assert torch.isfinite(grad_e).all()
        assert bool((grad_e[~mask] == 0).all())
        assert float(grad_e[0, 0]) == 0.0
        torch.testing.assert_close(loss_f, loss_e, rtol=1e-12, atol=0)
        torch.testing.assert_close(grad_f, grad_e, rtol=1e-12, atol=1e-15)
        for key, value in metrics_e.items():
            assert bool(torch.isfinite(value)), key
            torch.testing.assert_close(metrics_f[key], value, rtol=1e-12, atol=1e-14)


def test_fused_large_temperatures_stay_finite() -> None:
    x = inputs(1, b=3, t=16)
    x["log_prob"] = x["old_log_probs"] - 30.0  # r -> 0: the sigmoid's exp(-x) = e^tau would overflow
    eager = run(SAPOPolicyLossFn(tau_pos=100.0, tau_neg=120.0), x)
    fused = run(SAPOPolicyLossFn(tau_pos=100.0, tau_neg=120.0, fused=True), x)
    for loss, metrics, grad in (eager, fused):
        assert bool(torch.isfinite(loss))
        assert bool(torch.isfinite(grad).all())
        assert all(bool(torch.isfinite(v)) for v in metrics.values())
    torch.testing.assert_close(fused[0], eager[0], rtol=1e-6, atol=1e-30)
    torch.testing.assert_close(fused[2], eager[2], rtol=1e-6, atol=1e-30)


# Property tests: the fused path against the default (plain autograd) path.
#
# The kernel takes the temperatures as Python floats, so torch.compile recompiles (seconds) for every new
# shape or constant. The properties over random shapes, temperatures and dtypes therefore run the
# kernel's own function eagerly (the code the compiler compiles, with its hand-written derivative); the
# compiled kernel is checked on random data at the one shape and set of constants of the tests above.
#
# Tolerances: float64 agrees to 1e-11 relative, float32 to 2e-5 relative, each with an absolute floor of
# the same factor times the natural scale (loss: the aggregate of |A|·4/τ_pos, which bounds every
# per-token term; gradient: its largest element). The paths sum in different orders and the kernel takes
# exp as exp2 (relative error up to |δ·log2 e| ulps, δ up to 20). Per gradient element there is one more
# allowance, 4 ulps of 1 times 4·max(r, 1)·|A|·c_b (c_b the aggregation weight of the row): autograd
# differentiates the gate's sigmoid as σ(x)·(1 − σ(x)), whose 1 − σ(x) has an absolute error of half an
# ulp of 1 (large relative error where σ(x) is close to 1), where the kernel takes σ(x)·σ(−x).

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"]
TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-11}


@contextmanager
def eager_kernel() -> Iterator[None]:
    """Run :data:`SAPO_KERNEL`'s function without compiling it, for the duration of the block."""
    previous = SAPO_KERNEL.compiled
    SAPO_KERNEL.compiled = False
    try:
        yield
    finally:
        SAPO_KERNEL.compiled = previous


def random_inputs(seed: int, b: int, t: int, dtype: torch.dtype, density: float) -> dict[str, torch.Tensor]:
    """Inputs with random holes in the mask (rows may be empty), NaN stored at masked positions, and
    log-ratios drawn per token from three scales: near on policy, across the gate, across the ±20 clamp."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=g, dtype=dtype)
    mask = torch.rand(b, t, generator=g) < density
    scale = torch.tensor([0.05, 1.0, 25.0], dtype=dtype)[torch.randint(0, 3, (b, t), generator=g)]
    logprob = old + scale * torch.randn(b, t, generator=g, dtype=dtype)
    logprob = torch.where(mask, logprob, torch.nan)
    return {
        "log_prob": logprob,
        "old_log_probs": old,
        "response_mask": mask,
        "advantages": torch.randn(b, t, generator=g, dtype=dtype),
    }


def sigmoid_rounding(x: dict[str, torch.Tensor], mode: str) -> torch.Tensor:
    """Per element, ``4·eps·4·max(r, 1)·|A|·c_b``: the rounding of autograd's sigmoid derivative."""
    mask, t = x["response_mask"], x["response_mask"].shape[1]
    dtype = x["old_log_probs"].dtype
    ratio = torch.where(mask, x["log_prob"] - x["old_log_probs"], 0.0).clamp(-20, 20).exp()
    per_token = torch.zeros(mask.shape, dtype=dtype, requires_grad=True)
    (weights,) = torch.autograd.grad(aggregate_loss(per_token, mask, mode, max_tokens=t), per_token)
    adv = torch.where(mask, x["advantages"], 0.0).abs()
    return 4 * torch.finfo(dtype).eps * 4.0 * ratio.clamp_min(1) * adv * weights.abs()


def assert_paths_agree(
    plain: tuple[torch.Tensor, dict, torch.Tensor],
    fused: tuple[torch.Tensor, dict, torch.Tensor],
    tol: float,
    loss_scale: float,
    rounding: torch.Tensor | float = 0.0,
) -> None:
    """Loss, gradient and every metric of the two paths agree within ``tol`` and, per gradient element,
    ``rounding`` (see the tolerances above)."""
    torch.testing.assert_close(fused[0], plain[0], rtol=tol, atol=tol * loss_scale)
    assert torch.isfinite(plain[2]).all()
    grad_scale = float(plain[2].abs().max()) if plain[2].numel() else 0.0
    allowed = tol * grad_scale + tol * plain[2].abs() + rounding
    excess = (fused[2] - plain[2]).abs() - allowed
    assert bool((excess <= 0).all()), (
        f"gradients differ by up to {float((fused[2] - plain[2]).abs().max()):.3g} "
        f"(over the allowance by {float(excess.max()):.3g})"
    )
    assert fused[1].keys() == plain[1].keys()
    for key, value in plain[1].items():
        scale = loss_scale if key == "sapo_loss" else 4.0 * max(1.0, float(value.abs()))
        torch.testing.assert_close(fused[1][key], value, rtol=tol, atol=tol * scale, msg=key)


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    b=st.integers(1, 6),
    t=st.integers(1, 16),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    density=st.floats(0.0, 1.0),
    tau_pos=st.floats(0.05, 10.0),
    tau_extra=st.floats(0.0, 10.0),
    mode=st.sampled_from(MODES),
)
def test_fused_kernel_equals_the_plain_path_in_value_and_gradient(
    seed: int, b: int, t: int, dtype: torch.dtype, density: float, tau_pos: float, tau_extra: float, mode: str
) -> None:
    x = random_inputs(seed, b, t, dtype, density)
    args: dict = {"tau_pos": tau_pos, "tau_neg": tau_pos + tau_extra, "loss_agg_mode": mode}
    mask = x["response_mask"]
    loss_scale = float(aggregate_loss(x["advantages"].abs() * 4.0 / tau_pos, mask, mode, max_tokens=t))
    normalizers = global_normalizers(mask, max_tokens=t)
    plain = run(SAPOPolicyLossFn(**args), x, loss_scale=normalizers)
    with eager_kernel():
        fused = run(SAPOPolicyLossFn(fused=True, **args), x, loss_scale=normalizers)
    assert_paths_agree(plain, fused, TOLERANCE[dtype], loss_scale, sigmoid_rounding(x, mode))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), density=st.floats(0.0, 1.0))
def test_compiled_kernel_equals_the_plain_path_on_random_data(seed: int, density: float) -> None:
    # The shape and constants of test_fused_agrees_with_eager_without_host_syncs: one compilation.
    x = random_inputs(seed, 8, 48, torch.float32, density)
    x["advantages"] = x["advantages"][:, :1].expand(8, 48)
    plain = run(SAPOPolicyLossFn(), x)
    fused = run(SAPOPolicyLossFn(fused=True), x)
    loss_scale = float(aggregate_loss(x["advantages"].abs() * 4.0, x["response_mask"]))
    rounding = sigmoid_rounding(x, "token-mean")
    assert_paths_agree(plain, fused, TOLERANCE[torch.float32], loss_scale, rounding)
