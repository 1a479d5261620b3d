"""The opt-in ``fused=True`` loss path: a guarded ``torch.compile``, aggregation from per-row sums, and
hand-written gradients so that a kernel computing the per-token loss and its derivative in one pass
needs a single backward node.

A loss that does not ask for ``fused=True`` needs none of this: it writes its per-token terms in plain
torch and reduces them with ``self.aggregate``. Nothing here synchronises with the host.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from trinity_core.ops.aggregate import LOSS_AGG_MODES
from trinity_core.ops.fast import as_float

__all__ = [
    "FUSED_BACKEND",
    "CompiledKernel",
    "aggregate_row_sums",
    "aggregate_row_weights",
    "as_flags",
    "loss_with_local_gradient",
    "rows_with_gradient",
]

_log = logging.getLogger(__name__)

FUSED_BACKEND: Final[str] = "inductor"
"""The ``torch.compile`` backend of :class:`CompiledKernel`."""


def as_flags(mask: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``(flags, weights)``: a 0/1 or bool ``mask`` as bool flags and as ``1.0`` / ``0.0`` in ``dtype``.

    Compiled kernels should receive the float form: ``torch.compile`` on CPU loads bool tensors
    element by element, while ``weights != 0`` is one vector compare.
    """
    if mask.dtype == torch.bool:
        return mask, as_float(mask, dtype)
    return mask != 0, mask.to(dtype)


def _global_denominator(
    local: Tensor, global_count: Tensor | float | int | None, world_size: int
) -> tuple[Tensor, float]:
    if global_count is None:
        return local.clamp_min(1), 1.0
    count = torch.as_tensor(global_count, device=local.device).to(local.dtype)
    return count.clamp_min(1), float(world_size)


def _check_mode(name: str, loss_agg_mode: str, max_tokens: float | None) -> None:
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"{name}: unknown loss_agg_mode {loss_agg_mode!r}; valid modes are {', '.join(LOSS_AGG_MODES)}"
        )
    if loss_agg_mode == "seq-mean-token-sum-norm" and (max_tokens is None or not max_tokens > 0):
        raise ValueError(
            f"{name}: loss_agg_mode 'seq-mean-token-sum-norm' needs max_tokens > 0 (the Dr. GRPO "
            f"constant, e.g. the maximum response length), got {max_tokens!r}"
        )


def aggregate_row_sums(
    row_sum: Tensor,
    row_count: Tensor,
    loss_agg_mode: str,
    *,
    normalizer: Tensor | float | int | None = None,
    seq_normalizer: Tensor | float | int | None = None,
    max_tokens: float | None = None,
    world_size: int = 1,
) -> Tensor:
    """:func:`~trinity_core.ops.aggregate_loss` from per-row sums ``S_b`` and counts ``n_b``.

    ``row_sum`` ``(B,)`` holds ``S_b = Σ_t m·v``, ``row_count`` ``(B,)`` holds ``n_b = Σ_t m`` in the same
    floating dtype. With ``N_tok = Σ n_b`` and ``N_seq = #{b : n_b > 0}`` (or the global counts):
    ``token-mean`` ``Σ S_b / N_tok``; ``seq-mean-token-sum`` ``Σ S_b / N_seq``; ``seq-mean-token-mean``
    ``Σ (S_b / max(n_b, 1)) / N_seq``; ``seq-mean-token-sum-norm`` ``Σ S_b / (N_seq · max_tokens)``;
    ``token-sum`` ``Σ S_b · world_size``. Counts are clamped to 1 and a global count multiplies the loss by
    ``world_size``, as in ``aggregate_loss``.

    Raises:
        ValueError: unknown mode, or ``max_tokens`` missing or not positive for ``seq-mean-token-sum-norm``.
    """
    _check_mode("aggregate_row_sums", loss_agg_mode, max_tokens)
    if loss_agg_mode == "token-mean":
        denom, factor = _global_denominator(row_count.sum(), normalizer, world_size)
        return row_sum.sum() / denom * factor
    if loss_agg_mode == "token-sum":
        return row_sum.sum() * float(world_size)
    denom, factor = _global_denominator((row_count > 0).sum().to(row_sum.dtype), seq_normalizer, world_size)
    if loss_agg_mode == "seq-mean-token-mean":
        total = (row_sum / row_count.clamp_min(1)).sum()
    else:
        total = row_sum.sum()
    horizon = float(max_tokens) if loss_agg_mode == "seq-mean-token-sum-norm" and max_tokens else 1.0
    return total / (denom * horizon) * factor


def aggregate_row_weights(
    row_count: Tensor,
    loss_agg_mode: str,
    *,
    normalizer: Tensor | float | int | None = None,
    seq_normalizer: Tensor | float | int | None = None,
    max_tokens: float | None = None,
    world_size: int = 1,
) -> Tensor:
    """Per-row weights ``c`` ``(B,)`` with ``aggregate_row_sums(S, row_count, ...) = Σ_b c_b·S_b``.

    Every mode is linear in the row sums ``S_b`` with coefficients that depend only on the counts and
    the normalizers, so ``c_b = ∂L/∂S_b``: ``token-mean`` ``1/N_tok``; ``seq-mean-token-sum``
    ``1/N_seq``; ``seq-mean-token-mean`` ``1/(max(n_b, 1)·N_seq)``; ``seq-mean-token-sum-norm``
    ``1/(N_seq·max_tokens)``; ``token-sum`` ``world_size``; with the clamping and ``world_size`` factor
    of :func:`aggregate_row_sums`.
    A fused loss computes its value as ``Σ c_b S_b`` and its gradient as ``c_b`` times the per-token
    derivative (:func:`loss_with_local_gradient`): one backward node instead of the graph of the
    aggregation. Same validation (``ValueError``) as :func:`aggregate_row_sums`.
    """
    _check_mode("aggregate_row_weights", loss_agg_mode, max_tokens)
    if loss_agg_mode == "token-mean":
        denom, factor = _global_denominator(row_count.sum(), normalizer, world_size)
        return (factor / denom).expand_as(row_count)
    if loss_agg_mode == "token-sum":
        return torch.full_like(row_count, float(world_size))
    denom, factor = _global_denominator((row_count > 0).sum().to(row_count.dtype), seq_normalizer, world_size)
    if loss_agg_mode == "seq-mean-token-sum-norm" and max_tokens:
        denom = denom * float(max_tokens)
    if loss_agg_mode == "seq-mean-token-mean":
        return factor / (row_count.clamp_min(1) * denom)
    return (factor / denom).expand_as(row_count)


class _RowsWithGradient(torch.autograd.Function):
    @staticmethod
    def forward(x: Tensor, rows: Tensor, local_grad: Tensor) -> Tensor:
        return rows.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, Tensor, Tensor], output: Tensor) -> None:
        ctx.save_for_backward(inputs[2])
        ctx.x_dtype = inputs[0].dtype

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (local_grad,) = ctx.saved_tensors
        return (local_grad * grad.unsqueeze(-1)).to(ctx.x_dtype), None, None


def rows_with_gradient(x: Tensor, rows: Tensor, local_grad: Tensor) -> Tensor:
    """Return ``rows`` ``(B,)``, differentiable in ``x`` ``(B, T)`` with ``∂rows_b/∂x_bt = local_grad_bt``.

    For a fused kernel that already computed the per-row sums ``rows_b = Σ_t ℓ(x_bt)`` and the
    elementwise derivative ``local_grad = ℓ'(x)`` in one pass: backward is one multiply,
    ``∂L/∂x_bt = local_grad_bt · ∂L/∂rows_b``, and no graph of the elementwise part is kept.
    """
    out: Tensor = _RowsWithGradient.apply(x, rows, local_grad)  # type: ignore[no-untyped-call]
    return out


def _local_gradient_backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
    local_grad, row_coef = ctx.saved_tensors
    out = local_grad * (row_coef * grad).unsqueeze(-1)
    return (out if out.dtype == ctx.x_dtype else out.to(ctx.x_dtype)), None, None, None


_local_gradient_backward_once = once_differentiable(_local_gradient_backward)


class _LossWithLocalGradient(torch.autograd.Function):
    # The legacy forward(ctx, ...) form: its apply has less per-call overhead than setup_context's.
    @staticmethod
    def forward(ctx: Any, x: Tensor, value: Tensor, local_grad: Tensor, row_coef: Tensor) -> Tensor:
        ctx.save_for_backward(local_grad, row_coef)
        ctx.x_dtype = x.dtype
        return value.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        if torch.is_grad_enabled():  # create_graph=True: differentiating this result again must raise
            return _local_gradient_backward_once(ctx, grad)
        return _local_gradient_backward(ctx, grad)


def loss_with_local_gradient(x: Tensor, value: Tensor, local_grad: Tensor, row_coef: Tensor) -> Tensor:
    """The 0-d loss ``value``, differentiable in ``x`` ``(B, T)`` through one node:
    ``∂value/∂x_bt = row_coef_b · local_grad_bt``.

    For a fused kernel that computed the per-token derivative ``local_grad`` ``(B, T)`` (up to a
    constant, which goes into ``row_coef``) and the aggregation weights ``c`` of its row sums
    (:func:`aggregate_row_weights`), ``value = Σ_b c_b·S_b``, ``row_coef = constant·c``: backward is one
    multiply over ``(B, T)`` with no graph of the aggregation (which :func:`rows_with_gradient` followed
    by ``LossAggregation.aggregate_rows`` keeps). ``value`` itself is not differentiated. Not twice
    differentiable.
    """
    out: Tensor = _LossWithLocalGradient.apply(x, value, local_grad, row_coef)  # type: ignore[no-untyped-call]
    return out


class CompiledKernel:
    """A pure tensor function, compiled with ``torch.compile`` on first use, falling back to eager.

    The first call per new input shape compiles (seconds); :attr:`compile_seconds` accumulates that
    time so benchmarks can report it separately. If compilation fails (no C++ compiler, unsupported
    platform), a warning is logged once and the function runs eagerly from then on: same results,
    without the speed-up. :attr:`compiled` tells which happened.
    """

    def __init__(self, fn: Callable[..., Any], *, dynamic: bool | None = None) -> None:
        self.fn = fn
        self.dynamic = dynamic
        self.compile_seconds = 0.0
        self.compiled: bool | None = None
        self._compiled_fn: Callable[..., Any] | None = None
        self._seen: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> Any:
        """Run the compiled function (compiling first when needed) or, after a failure, ``fn``."""
        if self.compiled is False:
            return self.fn(*args)
        key = tuple((a.shape, a.dtype, a.device) if isinstance(a, Tensor) else a for a in args)
        if key in self._seen and self._compiled_fn is not None:
            return self._compiled_fn(*args)
        with self._lock:
            start = time.perf_counter()
            try:
                if self._compiled_fn is None:
                    self._compiled_fn = torch.compile(self.fn, backend=FUSED_BACKEND, dynamic=self.dynamic)
                result = self._compiled_fn(*args)
            except Exception as exc:  # any compiler failure means: run eagerly
                _log.warning(
                    "torch.compile of %s failed (%s: %s); running it eagerly. Install a C++ compiler "
                    "(gcc) for the fused speed-up, or set fused=False.",
                    getattr(self.fn, "__qualname__", self.fn),
                    type(exc).__name__,
                    exc,
                )
                self.compiled = False
                return self.fn(*args)
            self.compile_seconds += time.perf_counter() - start
            self.compiled = True
            self._seen.add(key)
            return result
