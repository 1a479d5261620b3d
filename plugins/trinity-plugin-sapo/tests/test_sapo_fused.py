"""``SAPOPolicyLossFn(fused=True)``: the compiled kernel agrees with the eager path to 1e-6 relative on
loss, gradient and metrics, without host syncs."""

from __future__ import annotations

import torch
from trinity_plugin_sapo import SAPOPolicyLossFn

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


def run(fn: SAPOPolicyLossFn, x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict, torch.Tensor]:
    lp = x["log_prob"].clone().requires_grad_(True)
    loss, metrics = fn(lp, **{k: v for k, v in x.items() if k != "log_prob"})
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
