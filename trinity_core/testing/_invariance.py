"""Micro-batch and rank invariance of policy losses: gradients of split computations vs. the whole batch.

With the step's global normalizers (``loss_scale=``, :func:`trinity_core.ops.global_normalizers`) and
summed micro-batch losses, the gradient of ``logprob`` must not depend on how the rows of a step are
cut. Inputs are the kit's loss inputs in float64 (so that 1e-6 relative is far above rounding), with one
fully masked row; every split is at an even row, so adjacent pairs (DPO) stay together.

Everything here runs both in the test process and in the 2-rank child processes
(:mod:`trinity_core.testing._distributed`), so it takes plain data (:class:`LossSpec`), not subjects.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from trinity_core.components.micro_batch_loss import own_loss_scale
from trinity_core.ops import LOSS_AGG_MODES, global_normalizers
from trinity_core.testing._inputs import loss_inputs

__all__ = [
    "EMPTY_ROW",
    "RTOL",
    "SEEDS",
    "LossSpec",
    "agg_modes",
    "build",
    "compare",
    "invariance_inputs",
    "load_class",
    "part_gradient",
    "split_point",
]

SEEDS: tuple[int, ...] = (0, 1)
"""Seeds of the inputs (``B`` is 4 or 6 depending on the seed)."""

RTOL = 1e-6
"""Allowed ``max |g_split − g_whole| / max |g_whole|``."""

EMPTY_ROW = 3
"""The row whose mask is cleared (a sequence with no selected token)."""


@dataclass(frozen=True)
class LossSpec:
    """How to rebuild one policy loss in any process.

    Attributes:
        key: identifies the loss in results (``"policy_loss:<name>"``).
        name: the registered name (resolved through :mod:`trinity_core.registry`) when ``path`` is None.
        path: ``"module:qualname"`` of a class that a fresh process cannot find in its registry
            (in-process registrations, classes given directly).
        args: argument overrides merged over the defaults.
    """

    key: str
    name: str
    path: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


def load_class(spec: LossSpec) -> Any:
    """The class of ``spec``: imported from ``spec.path``, else resolved in the registry."""
    if spec.path is not None:
        module, _, qualname = spec.path.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    from trinity_core import registry

    return registry.resolve("policy_loss", spec.name)


def agg_modes(cls: Any) -> list[str | None]:
    """Every mode of :data:`~trinity_core.ops.LOSS_AGG_MODES` when ``Args`` has ``loss_agg_mode``,
    else ``[None]`` (the loss's own default)."""
    model = getattr(cls, "Args", None)
    fields = getattr(model, "model_fields", {})
    return list(LOSS_AGG_MODES) if "loss_agg_mode" in fields else [None]


def build(cls: Any, args: Mapping[str, Any], mode: str | None) -> Any:
    """An instance with ``args`` (and ``loss_agg_mode=mode`` when given), backend verl."""
    merged = dict(args)
    if mode is not None:
        merged["loss_agg_mode"] = mode
    return cls.from_args(merged, backend="verl")


def invariance_inputs(cls: Any, seed: int) -> dict[str, Any]:
    """The kit's loss inputs for ``seed`` with row :data:`EMPTY_ROW` fully masked, the loss's
    ``conformance_inputs`` added, floating tensors in float64."""
    inputs: dict[str, Any] = loss_inputs(seed)
    inputs["action_mask"][EMPTY_ROW] = False
    provider = getattr(cls, "conformance_inputs", None)
    if callable(provider):
        inputs.update(provider(dict(inputs)))
    return {
        k: v.to(torch.float64) if isinstance(v, Tensor) and v.is_floating_point() else v
        for k, v in inputs.items()
    }


def split_point(rows: int) -> int:
    """Where the rows are cut: an even index near the first quarter (2 for 4 or 6 rows), so adjacent
    pairs stay together and the parts differ in size."""
    return 2 * max(1, rows // 4)


def _rows(inputs: Mapping[str, Any], rows: slice, batch: int) -> dict[str, Any]:
    # Per-row tensors (leading dimension B) are cut; anything else is passed whole.
    return {
        k: v[rows] if isinstance(v, Tensor) and v.dim() >= 1 and v.shape[0] == batch else v
        for k, v in inputs.items()
    }


def _normalizers(cls: Any, micro: Sequence[Mapping[str, Any]], max_tokens: float, all_reduce: bool) -> Any:
    own = own_loss_scale(cls, micro, max_tokens=max_tokens, all_reduce=all_reduce)
    if own is not None:
        return own
    return global_normalizers([m["action_mask"] for m in micro], max_tokens=max_tokens, all_reduce=all_reduce)


def part_gradient(
    cls: Any, instance: Any, inputs: Mapping[str, Any], parts: Sequence[slice], *, all_reduce: bool = False
) -> Tensor:
    """Gradient w.r.t. ``logprob`` ``(B, T)`` of the sum of the losses of ``parts`` (row slices), each
    call given the normalizers of all parts (all-reduced over ranks when ``all_reduce``)."""
    mask = inputs["action_mask"]
    batch, width = mask.shape
    micro = [_rows(inputs, rows, batch) for rows in parts]
    scale = _normalizers(cls, micro, float(width), all_reduce)
    logprob = inputs["logprob"].detach().clone().requires_grad_(True)
    total: Tensor | None = None
    for rows, sub in zip(parts, micro, strict=True):
        columns = {key: sub[instance.mapper.to_trinity(key)] for key in instance.select_keys}
        loss, _ = instance(logprob=logprob[rows], **columns, loss_scale=scale)
        total = loss if total is None else total + loss
    assert total is not None
    torch.autograd.backward(total)
    return logprob.grad if logprob.grad is not None else torch.zeros_like(logprob)


def compare(whole: Tensor, split: Tensor) -> str | None:
    """None when ``split`` equals ``whole`` to :data:`RTOL` relative (max norm), else what differs."""
    if not bool(torch.isfinite(whole).all()) or not bool(torch.isfinite(split).all()):
        return f"non-finite gradient (whole batch finite: {bool(torch.isfinite(whole).all())})"
    scale = float(whole.abs().max())
    diff = (split - whole).abs()
    err = float(diff.max())
    if err <= RTOL * max(scale, 1e-30):
        return None
    row = int(diff.max(dim=-1).values.argmax())
    return (
        f"max |difference| {err:.3g} = {err / max(scale, 1e-30):.3g} of max |gradient| {scale:.3g}, "
        f"worst at row {row}"
    )
