"""``PPOPolicyLossFn(fused=True)``: the compiled kernel agrees with the eager path to 1e-6 relative on
loss, gradient and metrics, without host syncs; the eager analytic gradient equals autograd's."""

from __future__ import annotations

import pytest
import torch
from trinity_plugin_ppo import PPOPolicyLossFn

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


def run(fn: PPOPolicyLossFn, x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict, torch.Tensor]:
    lp = x["log_prob"].clone().requires_grad_(True)
    loss, metrics = fn(lp, **{k: v for k, v in x.items() if k != "log_prob"})
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


def test_analytic_gradient_equals_autograd_of_the_formula() -> None:
    # The eager path differentiates by hand; autograd through the textbook formula must agree.
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
