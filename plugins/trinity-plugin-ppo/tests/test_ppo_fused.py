"""``PPOPolicyLossFn(fused=True)`` against the default path (plain torch, autograd): the compiled kernel
agrees to 1e-6 relative on loss, gradient and metrics without host syncs; property tests over random
shapes, masks, clip ranges, modes and dtypes hold the fused path equal to the plain one in value and
gradient (tolerances below)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_ppo import PPOPolicyLossFn
from trinity_plugin_ppo._kernel import PPO_KERNEL

from trinity_core.ops import aggregate_loss, global_normalizers
from trinity_core.testing import count_host_syncs


def inputs(seed: int, b: int = 8, t: int = 48) -> dict[str, torch.Tensor]:
    """float32 inputs with ratios spread wide enough to hit both clips and the dual clip.

    Advantages have mean 0.5, so the loss is not a near-cancellation of its terms (float32 rounding of
    a sum near 0 is large relative to the sum, whatever the order of summation).
    """
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    return {
        "log_prob": old + 0.5 * torch.randn(b, t, generator=g),
        "old_log_probs": old,
        "response_mask": torch.arange(t)[None, :] < lengths[:, None],
        "advantages": torch.randn(b, t, generator=g) + 0.5,
    }


def run(
    fn: PPOPolicyLossFn, x: dict[str, torch.Tensor], **extra: object
) -> tuple[torch.Tensor, dict, torch.Tensor]:
    lp = x["log_prob"].clone().requires_grad_(True)
    loss, metrics = fn(lp, **{k: v for k, v in x.items() if k != "log_prob"}, **extra)
    loss.backward()
    assert lp.grad is not None
    return loss.detach(), metrics, lp.grad


@pytest.mark.parametrize("seqmask", [False, True], ids=["plain", "seqmask"])
def test_fused_agrees_with_eager_without_host_syncs(seqmask: bool) -> None:
    x = inputs(0)
    for mode in ("token-mean", "seq-mean-token-mean"):
        args = {"clip_range_high": 0.28, "loss_agg_mode": mode, "enable_sequence_masking": seqmask}
        args["delta_sequence_masking"] = 0.0
        eager = run(PPOPolicyLossFn(**args), x)  # type: ignore[arg-type]
        fused_fn = PPOPolicyLossFn(fused=True, **args)  # type: ignore[arg-type]
        fused = run(fused_fn, x)
        torch.testing.assert_close(fused[0], eager[0], rtol=1e-6, atol=0)
        torch.testing.assert_close(fused[2], eager[2], rtol=1e-6, atol=1e-9)
        assert fused[1].keys() == eager[1].keys()
        for key in eager[1]:
            torch.testing.assert_close(fused[1][key], eager[1][key], rtol=1e-6, atol=1e-7)
        with count_host_syncs() as log:
            run(fused_fn, x)
        assert len(log) == 0, log.describe()


def test_default_path_gradient_equals_autograd_of_the_textbook_formula() -> None:
    x = {k: v.double() if v.is_floating_point() else v for k, v in inputs(3).items()}
    lo, hi, c = 0.2, 0.28, 3.0
    loss, _, grad = run(PPOPolicyLossFn(clip_range_low=lo, clip_range_high=hi, clip_ratio_c=c), x)
    lp = x["log_prob"].clone().requires_grad_(True)
    mask, adv = x["response_mask"], x["advantages"]
    ratio = torch.exp(torch.where(mask, lp - x["old_log_probs"], 0.0).clamp(-20, 20))
    l1, l2 = -adv * ratio, -adv * ratio.clamp(1 - lo, 1 + hi)
    clipped = torch.maximum(l1, l2)
    per_token = torch.where(adv < 0, torch.minimum(clipped, -adv * c), clipped)
    expected = torch.where(mask, per_token, 0.0).sum() / mask.sum()
    expected.backward()
    assert float(loss) == pytest.approx(float(expected), rel=1e-12)
    assert lp.grad is not None
    torch.testing.assert_close(grad, lp.grad, rtol=1e-12, atol=1e-15)


# Property tests: the fused path against the default (plain autograd) path.
#
# The kernel takes its clip constants as Python floats, so torch.compile recompiles (seconds) for every
# new shape or constant. The properties over random shapes, clip ranges and dtypes therefore run the
# kernel's own function eagerly (the code the compiler compiles, with its hand-written derivative); the
# compiled kernel is checked on random data at the one shape and set of constants of the test above.
#
# Tolerances: float64 agrees to 1e-12 relative, float32 to 1e-5 relative (the paths sum in different
# orders: row sums then rows here, one masked sum in aggregate_loss), each with an absolute floor of the
# same factor times the loss's natural scale (the aggregate of |A|·(r + c + 2), which bounds every
# per-token term and so the rounding of their sum).

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"]
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}


@contextmanager
def eager_kernel() -> Iterator[None]:
    """Run :data:`PPO_KERNEL`'s function without compiling it, for the duration of the block."""
    previous = PPO_KERNEL.compiled
    PPO_KERNEL.compiled = False
    try:
        yield
    finally:
        PPO_KERNEL.compiled = previous


def random_inputs(seed: int, b: int, t: int, dtype: torch.dtype, density: float) -> dict[str, torch.Tensor]:
    """Inputs with random holes in the mask (rows may be empty), NaN stored at masked positions (it must
    reach neither path's results), and log-ratios drawn per token from three scales: near on policy
    (inside the clip range), across the clip range, and across the ±20 clamp."""
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
        "advantages": torch.randn(b, t, generator=g, dtype=dtype) + 0.3,
    }


def natural_scale(x: dict[str, torch.Tensor], c: float, mode: str) -> float:
    """The aggregate of ``|A|·(r + c + 2)``: bounds the sum of |per-token terms| the loss rounds."""
    mask = x["response_mask"]
    delta = torch.where(mask, x["log_prob"] - x["old_log_probs"], 0.0).double().clamp(-20, 20)
    bound = x["advantages"].double().abs() * (delta.exp() + c + 2.0)
    return float(aggregate_loss(bound, mask, mode, max_tokens=mask.shape[1]))


def assert_paths_agree(
    plain: tuple[torch.Tensor, dict, torch.Tensor],
    fused: tuple[torch.Tensor, dict, torch.Tensor],
    tol: float,
    scale: float,
) -> None:
    """Loss, gradient and every metric of the two paths agree within ``tol`` (see the tolerances above)."""
    torch.testing.assert_close(fused[0], plain[0], rtol=tol, atol=tol * scale)
    grad_scale = float(plain[2].abs().max()) if plain[2].numel() else 0.0
    torch.testing.assert_close(fused[2], plain[2], rtol=tol, atol=tol * grad_scale)
    assert torch.isfinite(plain[2]).all()
    assert fused[1].keys() == plain[1].keys()
    for key, value in plain[1].items():
        metric_scale = scale if key == "pg_loss" else 1.0
        torch.testing.assert_close(fused[1][key], value, rtol=tol, atol=tol * metric_scale, msg=key)


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    b=st.integers(1, 6),
    t=st.integers(1, 16),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    density=st.floats(0.0, 1.0),
    lo=st.floats(0.0, 0.9),
    hi=st.floats(0.0, 2.0),
    c=st.floats(1.01, 10.0),
    mode=st.sampled_from(MODES),
    seqmask=st.sampled_from([None, -1.0, 0.0, 0.05]),
    fallback=st.booleans(),
)
def test_fused_kernel_equals_the_plain_path_in_value_and_gradient(
    seed: int,
    b: int,
    t: int,
    dtype: torch.dtype,
    density: float,
    lo: float,
    hi: float,
    c: float,
    mode: str,
    seqmask: float | None,
    fallback: bool,
) -> None:
    x = random_inputs(seed, b, t, dtype, density)
    args: dict = {
        "clip_range_low": lo,
        "clip_range_high": hi,
        "clip_ratio_c": c,
        "loss_agg_mode": mode,
        "enable_sequence_masking": seqmask is not None,
        "delta_sequence_masking": 0.0 if seqmask is None else seqmask,
        "fallback_to_policy_gradient": fallback,
    }
    scale = natural_scale(x, c, mode)
    loss_scale = global_normalizers(x["response_mask"], max_tokens=t)
    plain = run(PPOPolicyLossFn(**args), x, loss_scale=loss_scale)
    with eager_kernel():
        fused = run(PPOPolicyLossFn(fused=True, **args), x, loss_scale=loss_scale)
    assert_paths_agree(plain, fused, TOLERANCE[dtype], scale)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    density=st.floats(0.0, 1.0),
)
def test_compiled_kernel_equals_the_plain_path_on_random_data(seed: int, density: float) -> None:
    # The shape and constants of test_fused_agrees_with_eager_without_host_syncs: one compilation.
    x = random_inputs(seed, 8, 48, torch.float32, density)
    args = {"clip_range_high": 0.28, "loss_agg_mode": "token-mean"}
    plain = run(PPOPolicyLossFn(**args), x)  # type: ignore[arg-type]
    fused = run(PPOPolicyLossFn(fused=True, **args), x)  # type: ignore[arg-type]
    assert_paths_agree(plain, fused, TOLERANCE[torch.float32], natural_scale(x, 3.0, "token-mean"))


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_ties_split_the_gradient_as_autograd_does(fused: bool) -> None:
    # By hand, lo = hi = 0.2, c = 2, old log-probs 0, two tokens:
    #   r = 1, A = +1: ℓ1 = ℓ2 = −1 (inside the clip range: max splits, both halves pass), ∂ℓ/∂logπ = −1;
    #   r = 2, A = −1: ℓ1 = 2, ℓ2 = 1.2, C1 = 2 = −A·c: min splits, half of ∂ℓ1/∂logπ = r = 2 passes: 1.
    # token-mean over 2 tokens: loss (−1 + 2) / 2, gradient [−1, 1] / 2.
    assert math.exp(math.log(2.0)) == 2.0
    x = {
        "log_prob": torch.tensor([[0.0, math.log(2.0)]], dtype=torch.float64),
        "old_log_probs": torch.zeros(1, 2, dtype=torch.float64),
        "response_mask": torch.ones(1, 2, dtype=torch.bool),
        "advantages": torch.tensor([[1.0, -1.0]], dtype=torch.float64),
    }
    fn = PPOPolicyLossFn(clip_range=0.2, clip_ratio_c=2.0, fused=fused)
    with eager_kernel():  # the kernel's own tie rules, whatever the compiler makes of them
        loss, metrics, grad = run(fn, x)
    assert float(loss) == 0.5
    assert grad.tolist() == [[-0.5, 0.5]]
    assert float(metrics["pg_clipfrac"]) == 0.0
    assert float(metrics["pg_clipfrac_lower"]) == 0.0
