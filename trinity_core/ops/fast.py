"""Opt-in CPU speed kernels: exact replacements for plain torch, for code that a benchmark shows is the
bottleneck end to end (``benchmarks/``; figures in ``docs/benchmarks.md``).

Each kernel gives the same bits as the plain expression it names, so a caller can switch between the
two freely; tests compare them bit for bit. Use the plain code (:func:`trinity_core.ops.select`,
``torch.where``, ``Tensor.to``) unless a benchmark says otherwise: the default path of every shipped
loss, KL function, advantage function and add strategy calls nothing here (a test asserts it,
``tests/test_plain_default_path.py``); only the opt-in ``fused=True`` paths do. Nothing here
synchronises with the host.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import torch
from torch import Tensor

__all__ = [
    "as_float",
    "bit_choose",
    "bit_select",
    "mask_bits",
    "row_sums",
    "scratch_buffers",
    "split_views",
]

_INT_OF_WIDTH: Final[dict[int, torch.dtype]] = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def mask_bits(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``mask`` as integers of ``dtype``'s width: all bits set (``-1``) where selected, ``0`` elsewhere.

    Why: on CPU, kernels that read a ``bool`` operand are not vectorised; an integer ``&`` is.
    """
    int_type = _INT_OF_WIDTH[torch.empty((), dtype=dtype).element_size()]
    flags = mask if mask.dtype == torch.bool else mask != 0
    # bool -> uint8 is a reinterpretation; uint8 -> int is a vectorised widening copy.
    return flags.view(torch.uint8).to(int_type).neg_()


def as_float(flags: Tensor, dtype: torch.dtype) -> Tensor:
    """``flags.to(dtype)`` for bool ``flags``.

    Why: on CPU a bool-to-float conversion is not vectorised; reading the bools as bytes first is.
    """
    if torch.compiler.is_compiling():
        return flags.to(dtype)
    return flags.view(torch.uint8).to(dtype)


def _and_bits(x: Tensor, bits: Tensor) -> Tensor:
    return torch.bitwise_and(x.view(bits.dtype), bits).view(x.dtype)


class _BitSelect(torch.autograd.Function):
    """``x`` where ``bits`` is ``-1`` and ``+0`` elsewhere; the gradient is selected the same way."""

    @staticmethod
    def forward(x: Tensor, bits: Tensor) -> Tensor:
        return _and_bits(x, bits)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, Tensor], output: Tensor) -> None:
        ctx.save_for_backward(inputs[1])
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None]:
        (bits,) = ctx.saved_tensors
        out = _and_bits(grad.contiguous(), bits)
        if out.shape != ctx.shape:
            out = out.sum_to_size(ctx.shape)
        return out, None


def bit_select(x: Tensor, flags: Tensor, bits: Tensor | None = None) -> Tensor:
    """Exactly ``torch.where(flags, x, 0)`` for floating ``x``, as one integer ``&`` on the float's bits.

    Why: a vectorised ``&`` instead of the unvectorised bool ``where`` on CPU. ``bits`` is
    ``mask_bits(flags, x.dtype)`` when the caller already has it. Under ``torch.compile`` this is
    ``torch.where``, which the compiler fuses. Differentiable in ``x`` with gradient
    ``where(flags, grad, 0)``.
    """
    if torch.compiler.is_compiling():
        return torch.where(flags, x, torch.zeros((), dtype=x.dtype, device=x.device))
    if bits is None:
        bits = mask_bits(flags, x.dtype)
    if x.element_size() != bits.element_size() or not x.is_floating_point():
        raise ValueError(
            f"bit_select: values of dtype {x.dtype} do not match mask bits of dtype {bits.dtype}; build "
            "the bits with mask_bits(mask, values.dtype)"
        )
    if x.requires_grad:
        out: Tensor = _BitSelect.apply(x, bits)  # type: ignore[no-untyped-call]
        return out
    return _and_bits(x, bits)


def bit_choose(flags: Tensor, a: Tensor, b: Tensor, bits: Tensor | None = None) -> Tensor:
    """Exactly ``torch.where(flags, a, b)`` for floating ``a`` and ``b`` (not differentiable).

    Why: as :func:`bit_select`, ``(a & bits) | (b & ~bits)`` is vectorised on CPU where ``where`` is not.
    """
    if torch.compiler.is_compiling():
        return torch.where(flags, a, b)
    dtype = torch.promote_types(a.dtype, b.dtype)
    if bits is None:
        bits = mask_bits(flags, dtype)
    a_bits = a.to(dtype).view(bits.dtype)
    b_bits = b.to(dtype).view(bits.dtype)
    return torch.bitwise_or(torch.bitwise_and(a_bits, bits), torch.bitwise_and(b_bits, ~bits)).view(dtype)


_ROW_BLOCK_ELEMENTS: Final[int] = 1 << 16
"""Elements per block of :func:`row_sums`: a converted float64 block of this size stays in cache."""


def row_sums(x: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """Exactly ``torch.where(mask, x, 0).sum(dim=-1, dtype=dtype)`` of a 2-D ``x``, without autograd.

    Why: ``sum(dtype=)`` converts its whole input first, a large temporary on fresh pages on every call;
    converting one cache-sized block of rows at a time avoids it. Each row is reduced alone, so the
    bits are the same.
    """
    rows = max(1, _ROW_BLOCK_ELEMENTS // max(x.shape[1], 1))
    if not x.is_floating_point():
        return torch.where(mask, x, 0).sum(dim=-1, dtype=dtype)
    out = torch.empty(x.shape[0], dtype=dtype, device=x.device)
    for start in range(0, x.shape[0], rows):
        stop = start + rows
        torch.sum(bit_select(x[start:stop], mask[start:stop]), dim=-1, dtype=dtype, out=out[start:stop])
    return out


_SCRATCH = threading.local()


def scratch_buffers(
    count: int, shape: torch.Size | tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> list[Tensor]:
    """``count`` uninitialised contiguous tensors of ``shape``, reused from call to call on CPU.

    Why: the CPU allocator hands large blocks back to the system, so every fresh multi-megabyte
    temporary costs page faults, often more than the arithmetic on it. For the temporaries of an eager
    kernel that must not outlive the call (never for a tensor that is returned or saved for backward):
    per thread and dtype, ``count`` flat buffers that grow to the largest ``numel`` seen, viewed as
    ``shape``; the views of one call are valid until the next call of the same thread and dtype. On
    other devices (whose caching allocators already reuse memory) they are plain ``torch.empty``.
    """
    if torch.device(device).type != "cpu":
        return [torch.empty(shape, dtype=dtype, device=device) for _ in range(count)]
    numel = 1
    for size in shape:
        numel *= size
    pools: dict[torch.dtype, list[Tensor]] | None = getattr(_SCRATCH, "pools", None)
    if pools is None:
        pools = _SCRATCH.pools = {}
    pool = pools.get(dtype, [])
    if len(pool) < count or (pool and pool[0].numel() < numel):
        size = max([numel] + [buf.numel() for buf in pool[:1]])
        pool = pools[dtype] = [torch.empty(size, dtype=dtype) for _ in range(max(count, len(pool)))]
    return [buf[:numel].view(shape) for buf in pool[:count]]


def split_views(x: Tensor, sizes: int | list[int]) -> tuple[Tensor, ...]:
    """The pieces of ``torch.split(x, sizes)`` (same storage, same views) for an ``x`` that never
    requires grad.

    Why: the write-back of advantages creates one view per experience; ``unsafe_split`` skips the
    autograd view tracking of ``split``, which has nothing to protect there and costs more than the
    views themselves.
    """
    if isinstance(sizes, int):
        return tuple(torch.unsafe_split(x, sizes))
    return tuple(torch.unsafe_split_with_sizes(x, sizes))
