"""Input builders and checks for policy-loss tests, for plugin authors.

The conformance kit runs the standard checks on every installed loss; these helpers are for a plugin's
own, more specific tests: random padded inputs in verl names (``loss_inputs``), the loss, metrics and
gradient of one call (``grad_of``), NaN/inf planted at masked positions
(``assert_nan_at_masked_positions_leaks_nowhere``), zero host syncs with detached 0-d metrics
(``assert_no_host_sync_and_detached_metrics``), micro-batch invariance under the step's global
normalizers (``assert_micro_batch_invariant``) and the per-token divisor of each aggregation mode
(``agg_denominator``), for golden gradients derived by hand.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs

__all__ = [
    "AGG_MODES",
    "agg_denominator",
    "assert_micro_batch_invariant",
    "assert_nan_at_masked_positions_leaks_nowhere",
    "assert_no_host_sync_and_detached_metrics",
    "grad_of",
    "loss_inputs",
]

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
"""The four normalised modes; :data:`trinity_core.ops.LOSS_AGG_MODES` adds ``token-sum`` (divisor 1 in
:func:`agg_denominator`)."""


def loss_inputs(
    seed: int, b: int = 5, t: int = 9, spread: float = 0.3, empty_rows: bool = False
) -> dict[str, torch.Tensor]:
    """Random float64 inputs in verl names: right padding plus interior holes, >= 1 token per row unless
    ``empty_rows``; advantages constant per row (sequence-level, as from GRPO)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    hole = torch.rand(b, t, generator=g) < 0.2
    mask = mask & ~(hole & (torch.arange(t)[None, :] > 0))
    if empty_rows:
        mask[0] = False
    return {
        "log_prob": old + spread * torch.randn(b, t, generator=g, dtype=torch.float64),
        "old_log_probs": old,
        "response_mask": mask,
        "advantages": torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).clone(),
    }


def grad_of(
    fn: Any, inputs: dict[str, torch.Tensor], **extra: Any
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """``(loss, metrics, d loss / d log_prob)`` of ``fn(log_prob, **rest)``."""
    lp = inputs["log_prob"].clone().requires_grad_(True)
    rest = {k: v for k, v in inputs.items() if k != "log_prob"}
    loss, metrics = fn(lp, **rest, **extra)
    loss.backward()
    assert lp.grad is not None
    return loss.detach(), metrics, lp.grad


def assert_nan_at_masked_positions_leaks_nowhere(fn: Any, inputs: dict[str, torch.Tensor]) -> None:
    """NaN/±inf planted at masked positions of every float input change neither loss, metrics nor grad."""
    mask = inputs["response_mask"]
    dirty = {k: v.clone() for k, v in inputs.items()}
    for key in ("log_prob", "old_log_probs", "advantages"):
        dirty[key][~mask] = math.nan
    dirty["old_log_probs"][~mask & (torch.arange(mask.shape[1]) % 2 == 0)] = math.inf
    dirty["log_prob"][~mask & (torch.arange(mask.shape[1]) % 3 == 0)] = -math.inf
    loss_c, metrics_c, grad_c = grad_of(fn, inputs)
    loss_d, metrics_d, grad_d = grad_of(fn, dirty)
    assert torch.isfinite(loss_c)
    assert torch.equal(loss_c, loss_d)
    assert torch.equal(grad_c, grad_d)
    assert bool((grad_d[~mask] == 0).all())
    assert metrics_c.keys() == metrics_d.keys()
    for key in metrics_c:
        assert torch.equal(metrics_c[key], metrics_d[key]), key


def assert_no_host_sync_and_detached_metrics(
    fn: Any, inputs: dict[str, torch.Tensor], keys: set[str]
) -> None:
    """The call and its backward never synchronise; metrics are exactly ``keys``, detached 0-d tensors."""
    lp = inputs["log_prob"].clone().float().requires_grad_(True)
    rest = {k: (v.float() if v.is_floating_point() else v) for k, v in inputs.items() if k != "log_prob"}
    with count_host_syncs() as log:
        loss, metrics = fn(log_prob=lp, **rest)
        loss.backward()
    assert len(log) == 0, log.describe()
    assert set(metrics) == keys
    for value in metrics.values():
        assert isinstance(value, torch.Tensor)
        assert value.dim() == 0
        assert not value.requires_grad


def assert_micro_batch_invariant(fn: Any, inputs: dict[str, torch.Tensor]) -> None:
    """Summing micro-batch losses aggregated with the step's global normalizers gives the full-batch loss
    and gradient (to 1e-12 relative in float64, well inside the 1e-6 required)."""
    mask = inputs["response_mask"]
    width = mask.shape[1]
    full_loss, _, full_grad = grad_of(fn, inputs, loss_scale=global_normalizers(mask, max_tokens=width))
    b = mask.shape[0]
    parts = [slice(0, 1), slice(1, b // 2 + 1), slice(b // 2 + 1, b)]
    scale = global_normalizers([mask[p] for p in parts], max_tokens=width)
    lp = inputs["log_prob"].clone().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    for p in parts:
        rest = {k: v[p] for k, v in inputs.items() if k != "log_prob"}
        loss, _ = fn(lp[p], **rest, loss_scale=scale)
        total = total + loss
    torch.autograd.backward(total)
    torch.testing.assert_close(total.detach(), full_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(lp.grad, full_grad, rtol=1e-12, atol=1e-14)


def agg_denominator(mask: torch.Tensor, mode: str, max_tokens: float | None = None) -> torch.Tensor:
    """Per-token divisor ``D`` with ``∂agg(v)/∂v_t = 1/D_t`` for ``mode`` (float64, shape of ``mask``)."""
    counts = mask.sum(-1, keepdim=True).double()
    n_seq = (counts > 0).sum().clamp_min(1).double()
    if mode == "token-mean":
        return mask.sum().clamp_min(1).double().expand(mask.shape)
    if mode == "seq-mean-token-mean":
        return (counts.clamp_min(1) * n_seq).expand(mask.shape)
    if mode == "seq-mean-token-sum":
        return n_seq.expand(mask.shape)
    if mode == "token-sum":
        return torch.ones(mask.shape, dtype=torch.float64, device=mask.device)
    assert max_tokens is not None
    return (n_seq * max_tokens).expand(mask.shape)
