"""The ``rec`` policy loss: in-range masks, weights and regularisers from the formulas (gradients by hand),
clamping, masking, global normalizers, no host synchronisation."""

from __future__ import annotations

import math
from itertools import product

import pydantic
import pytest
import torch
from trinity_plugin_rec import RECPolicyLossFn

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs

CLIP_MODES = ["none", "one-side", "gspo-one-side", "two-side", "ring"]
WEIGHTS = ["none", "importance_sampling", "gspo_importance_sampling", "advantage"]
REGULARIZERS = ["none", "k2", "forward-kl"]


def grad_and_loss(fn: RECPolicyLossFn, logprob: torch.Tensor, **kwargs: torch.Tensor) -> tuple:
    lp = logprob.clone().requires_grad_(True)
    loss, metrics = fn(lp, **kwargs)
    loss.backward()
    return lp.grad, loss, metrics


def test_defaults_keys_and_validation() -> None:
    assert RECPolicyLossFn.default_args() == {
        "epsilon_low": 0.2,
        "epsilon_high": 0.2,
        "epsilon_low_prime": 0.4,
        "epsilon_high_prime": 0.4,
        "clip_mode": "none",
        "weight": "none",
        "regularizer": "none",
        "regularizer_coef": 0.0,
        "temp": 1.0,
        "loss_agg_mode": None,
    }
    assert RECPolicyLossFn().select_keys == ["old_log_probs", "response_mask", "advantages"]
    for bad in (
        {"epsilon_low": 1.5},
        {"epsilon_high": 0.0},
        {"clip_mode": "three-side"},
        {"weight": "x"},
        {"regularizer": "k3"},
        {"regularizer_coef": -1.0},
        {"temp": 0.0},
    ):
        with pytest.raises(pydantic.ValidationError):
            RECPolicyLossFn(**bad)


# Seven tokens of one row, old = 0, logp = log r; eps = 0.2 / 0.2, primes 0.4 / 0.4.
RATIOS = [0.5, 0.7, 1.1, 1.3, 1.5, 3.0, 0.7]
ADV = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0, -1.0]
IN_RANGE = {
    "none": [1, 1, 1, 1, 1, 1, 1],
    "two-side": [0, 0, 1, 0, 0, 0, 0],
    "one-side": [1, 1, 1, 1, 1, 0, 0],
    "ring": [1, 0, 1, 0, 1, 0, 0],
}


@pytest.mark.parametrize("mode", list(IN_RANGE))
def test_token_in_range_masks_golden(mode: str) -> None:
    # token-mean over 7 tokens, weight none: dL/dlogp_t = -A_t * in_t / 7; pg_clipfrac = #out / 7.
    fn = RECPolicyLossFn(clip_mode=mode)
    logprob = torch.log(torch.tensor([RATIOS], dtype=torch.float64))
    grad, loss, metrics = grad_and_loss(
        fn,
        logprob,
        old_logprob=torch.zeros(1, 7, dtype=torch.float64),
        action_mask=torch.ones(1, 7, dtype=torch.bool),
        advantages=torch.tensor([ADV], dtype=torch.float64),
    )
    inside = IN_RANGE[mode]
    assert grad[0].tolist() == pytest.approx([-a * i / 7 for a, i in zip(ADV, inside, strict=True)])
    value = -sum(a * i * math.log(r) for a, i, r in zip(ADV, inside, RATIOS, strict=True)) / 7
    assert float(loss.detach()) == pytest.approx(value)
    assert float(metrics["pg_clipfrac"]) == pytest.approx((7 - sum(inside)) / 7)


def expected_gradient(
    clip: str,
    weight: str,
    reg: str,
    coef: float,
    temp: float,
    lr: list[list[float]],
    adv: list[list[float]],
    mask: list[list[bool]],
) -> list[list[float]]:
    """dL/dlogp from the documented formulas (token-mean, or seq-mean-token-mean with gspo-one-side)."""
    lo, hi, lo_p, hi_p = 0.8, 1.2, 0.6, 1.4
    n_tok = sum(map(sum, mask))
    rows = [row for row in mask if any(row)]
    out = []
    for b, (row_lr, row_a, row_m) in enumerate(zip(lr, adv, mask, strict=True)):
        n_b = sum(row_m)
        seq = math.exp(sum(x for x, m in zip(row_lr, row_m, strict=True) if m) / max(n_b, 1))
        grads = []
        for x, a, m in zip(row_lr, row_a, row_m, strict=True):
            if not m:
                grads.append(0.0)
                continue
            r = math.exp(x)
            inside = {
                "none": True,
                "two-side": lo <= r <= hi,
                "one-side": (a >= 0 and r <= hi) or (a <= 0 and r >= lo),
                "gspo-one-side": (a >= 0 and seq <= hi) or (a <= 0 and seq >= lo),
                "ring": (lo <= r <= hi) or (a >= 0 and r <= lo_p) or (a <= 0 and r >= hi_p),
            }[clip]
            w = {
                "none": a,
                "importance_sampling": a * r,
                "gspo_importance_sampling": a * seq,
                "advantage": a * math.exp(a / temp),
            }[weight]
            g = -w if inside else 0.0
            g += {"none": 0.0, "k2": 2 * coef * x, "forward-kl": -coef}[reg]
            denom = n_b * len(rows) if clip == "gspo-one-side" else n_tok
            grads.append(g / denom)
        out.append(grads)
        del b
    return out


COMBINATIONS = list(product(CLIP_MODES, WEIGHTS, REGULARIZERS))


@pytest.mark.parametrize(("clip", "weight", "reg"), COMBINATIONS)
def test_every_combination_matches_the_formulas(clip: str, weight: str, reg: str) -> None:
    g = torch.Generator().manual_seed(COMBINATIONS.index((clip, weight, reg)))
    b, t = 3, 6
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    log_ratio = 0.4 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).contiguous()
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[:, 0] = True
    fn = RECPolicyLossFn(clip_mode=clip, weight=weight, regularizer=reg, regularizer_coef=0.3, temp=0.7)
    grad, loss, metrics = grad_and_loss(
        fn, old + log_ratio, old_logprob=old, action_mask=mask, advantages=adv
    )
    expected = expected_gradient(clip, weight, reg, 0.3, 0.7, log_ratio.tolist(), adv.tolist(), mask.tolist())
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert bool(torch.isfinite(loss))
    assert set(metrics) == {"pg_loss", "pg_clipfrac"}


def test_gspo_weight_works_without_gspo_clipping() -> None:
    # The reference raises NameError for this combination; here ŝ is computed whenever it is needed.
    fn = RECPolicyLossFn(clip_mode="two-side", weight="gspo_importance_sampling")
    lp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    old = torch.tensor([[-1.1, -1.9]], dtype=torch.float64)
    grad, _, _ = grad_and_loss(
        fn,
        lp,
        old_logprob=old,
        action_mask=torch.ones(1, 2, dtype=torch.bool),
        advantages=torch.ones(1, 2).double(),
    )
    seq = math.exp(((0.1) + (-0.1)) / 2)  # = 1: both tokens in range (r = e^0.1, e^-0.1)
    assert grad[0].tolist() == pytest.approx([-seq / 2, -seq / 2])


def test_ratios_are_clamped_against_overflow() -> None:
    for clip, weight in product(CLIP_MODES, WEIGHTS):
        fn = RECPolicyLossFn(clip_mode=clip, weight=weight, regularizer="k2", regularizer_coef=0.1)
        lp = torch.tensor([[0.0, 500.0, -500.0]])
        grad, loss, metrics = grad_and_loss(
            fn,
            lp,
            old_logprob=torch.zeros(1, 3),
            action_mask=torch.ones(1, 3, dtype=torch.bool),
            advantages=torch.tensor([[200.0, 1.0, -1.0]]),
        )
        assert bool(torch.isfinite(loss)), (clip, weight)
        assert bool(torch.isfinite(grad).all()), (clip, weight)
        assert all(bool(torch.isfinite(v)) for v in metrics.values())


@pytest.mark.parametrize(
    ("clip", "weight"), [("ring", "advantage"), ("gspo-one-side", "importance_sampling")]
)
def test_nan_at_masked_positions_leaks_nowhere(clip: str, weight: str) -> None:
    mask = torch.tensor([[True, True, False], [True, False, False]])
    clean = {
        "logprob": torch.tensor([[-0.5, -1.0, -0.2], [-0.3, -0.1, -0.4]]),
        "old_logprob": torch.tensor([[-0.6, -0.9, -0.2], [-0.2, -0.1, -0.4]]),
        "advantages": torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]]),
    }
    dirty = {k: v.clone() for k, v in clean.items()}
    for value in dirty.values():
        value[~mask] = math.nan
    dirty["old_logprob"][0, 2] = math.inf
    dirty["advantages"][1, 2] = -math.inf
    fn = RECPolicyLossFn(clip_mode=clip, weight=weight, regularizer="k2", regularizer_coef=0.2)
    results = []
    for inputs in (clean, dirty):
        results.append(
            grad_and_loss(
                fn,
                inputs["logprob"],
                old_logprob=inputs["old_logprob"],
                action_mask=mask,
                advantages=inputs["advantages"],
            )
        )
    (g_c, l_c, m_c), (g_d, l_d, m_d) = results
    assert torch.equal(l_c, l_d)
    assert torch.equal(g_c, g_d)
    assert bool((g_d[~mask] == 0).all())
    for k in m_c:
        assert torch.equal(m_c[k], m_d[k]), k


def test_no_host_sync_and_detached_metrics() -> None:
    fn = RECPolicyLossFn(
        clip_mode="gspo-one-side", weight="advantage", regularizer="forward-kl", regularizer_coef=0.1
    )
    lp = torch.randn(3, 5, requires_grad=True)
    with count_host_syncs() as log:
        loss, metrics = fn(
            log_prob=lp,
            old_log_probs=torch.randn(3, 5),
            response_mask=torch.rand(3, 5) > 0.3,
            advantages=torch.randn(3, 5),
        )
        loss.backward()
    assert len(log) == 0, log.describe()
    assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())


@pytest.mark.parametrize(
    ("clip", "mode"), [("two-side", None), ("gspo-one-side", None), ("ring", "seq-mean-token-sum")]
)
def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient(
    clip: str, mode: str | None
) -> None:
    torch.manual_seed(0)
    b, t = 6, 7
    lp = -torch.rand(b, t, dtype=torch.float64) * 2
    old = lp + 0.2 * torch.randn(b, t, dtype=torch.float64)
    adv = torch.randn(b, 1, dtype=torch.float64).expand(b, t)
    mask = torch.rand(b, t) > 0.4
    mask[2] = False
    fn = RECPolicyLossFn(
        clip_mode=clip,
        weight="importance_sampling",
        regularizer="k2",
        regularizer_coef=0.1,
        loss_agg_mode=mode,
    )
    full_lp = lp.clone().requires_grad_(True)
    full, _ = fn(
        full_lp, old_logprob=old, action_mask=mask, advantages=adv, loss_scale=global_normalizers(mask)
    )
    full.backward()
    parts = [slice(0, 1), slice(1, 4), slice(4, 6)]
    scale = global_normalizers([mask[p] for p in parts])
    micro_lp = lp.clone().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    for p in parts:
        loss, _ = fn(
            micro_lp[p], old_logprob=old[p], action_mask=mask[p], advantages=adv[p], loss_scale=scale
        )
        total = total + loss
    total.backward()
    torch.testing.assert_close(total, full, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(micro_lp.grad, full_lp.grad, rtol=1e-12, atol=1e-14)


def test_explicit_loss_agg_mode_wins_and_trainer_mode_does_not() -> None:
    lp = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    kwargs = {"old_logprob": lp, "action_mask": mask, "advantages": torch.ones(2, 3, dtype=torch.float64)}
    # token-mean: (3 + 2) / 4; seq-mean-token-mean: (1 + 2) / 2.
    assert float(RECPolicyLossFn()(lp, **kwargs)[0]) == pytest.approx(5 / 4)
    assert float(RECPolicyLossFn()(lp, loss_agg_mode="seq-mean-token-mean", **kwargs)[0]) == pytest.approx(
        5 / 4
    )
    forced = RECPolicyLossFn(loss_agg_mode="seq-mean-token-mean")
    assert float(forced(lp, **kwargs)[0]) == pytest.approx(3 / 2)
