"""``SAPOPolicyLossFn(fused=True)``: the compiled kernel agrees with the eager path to 1e-6 relative on
loss, gradient and metrics, without host syncs."""

from __future__ import annotations

import torch
from trinity_plugin_sapo import SAPOPolicyLossFn

from trinity_core.testing._hostsync import count_host_syncs


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
