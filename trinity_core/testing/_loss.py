"""Checks shared by every loss-like call (policy loss, KL loss, KL penalty, entropy loss).

A :class:`LossProbe` says how to call one method of a component with generated inputs; the functions
here run the generic checks on it: finite output, gradients, masked positions ignored, metrics as
detached 0-d tensors, no host synchronisation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trinity_core.testing._core import ConformanceError, Subject
from trinity_core.testing._inputs import LOSS_INPUT_NAMES, loss_inputs, plant_masked
from trinity_core.testing.common import runtime_objects
from trinity_core.testing.host_syncs import count_host_syncs

__all__ = [
    "SEEDS",
    "LossProbe",
    "check_detached_metrics",
    "check_differentiable",
    "check_finite",
    "check_masked_ignored",
    "check_no_host_sync",
]

SEEDS: tuple[int, ...] = (0, 1)
"""Seeds of the generated inputs; each check runs once per seed."""

RTOL, ATOL = 1e-5, 1e-6

_INPUTS_FIX = (
    "declare on the class `@classmethod def conformance_inputs(cls, inputs): return {'<name>': tensor}` "
    "building the missing inputs from the generated ones (inputs['action_mask'] gives B and T)"
)


@dataclass(frozen=True)
class LossProbe:
    """How to call one loss-like method.

    Attributes:
        what: the call in words, for messages (``"__call__"``).
        invoke: ``invoke(instance, inputs, extra_keys) -> result``; ``extra_keys`` are the inputs that
            came from the component's ``conformance_inputs``.
        needs: ``needs(instance) -> names`` of the inputs the call reads.
        grad_inputs: inputs that require grad; the gradient must reach them (empty: not a loss).
        token_output: the output is ``(B, T)`` (compared at selected positions only), not a 0-d loss.
    """

    what: str
    invoke: Callable[[Any, dict[str, Any], tuple[str, ...]], Any]
    needs: Callable[[Any], list[str]]
    grad_inputs: tuple[str, ...] = ("logprob",)
    token_output: bool = False


@dataclass
class _Prepared:
    instance: Any
    inputs: dict[str, Any]
    extra_keys: tuple[str, ...]


def _prepare(subject: Subject, probe: LossProbe, seed: int) -> _Prepared:
    instance = subject.build(**runtime_objects(subject))
    inputs: dict[str, Any] = loss_inputs(seed)
    extra: tuple[str, ...] = ()
    provider = getattr(subject.obj, "conformance_inputs", None)
    if callable(provider):
        more = provider(dict(inputs))
        if not isinstance(more, Mapping):
            raise ConformanceError(f"conformance_inputs returned {more!r}, not a dict", _INPUTS_FIX)
        extra = tuple(k for k in more if k not in LOSS_INPUT_NAMES)
        inputs.update(more)
    missing = [k for k in probe.needs(instance) if k not in inputs]
    if missing:
        raise ConformanceError(
            f"{probe.what} needs inputs {missing} that the kit does not generate (it generates "
            f"{', '.join(LOSS_INPUT_NAMES)})",
            _INPUTS_FIX,
        )
    return _Prepared(instance, inputs, extra)


def _call(
    probe: LossProbe, prep: _Prepared, inputs: dict[str, Any]
) -> tuple[Tensor, dict[str, Any], dict[str, Tensor]]:
    """Call with fresh grad leaves for ``probe.grad_inputs``; return ``(output, metrics, leaves)``."""
    args = dict(inputs)
    leaves = {k: args[k].detach().clone().requires_grad_(True) for k in probe.grad_inputs}
    args.update(leaves)
    result = probe.invoke(prep.instance, args, prep.extra_keys)
    output, metrics = _unpack(probe, result)
    return output, metrics, leaves


def _unpack(probe: LossProbe, result: Any) -> tuple[Tensor, dict[str, Any]]:
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise ConformanceError(
            f"{probe.what} returned {type(result).__name__}, not a tuple (tensor, metrics dict)",
            "return (loss, {'<metric>': value.detach()})",
        )
    output, metrics = result
    if not isinstance(output, Tensor):
        raise ConformanceError(
            f"{probe.what} returned {type(output).__name__} as its first element, not a tensor",
            "return the loss as a tensor (it is back-propagated)",
        )
    return output, metrics


def _selected(probe: LossProbe, output: Tensor, mask: Tensor) -> Tensor:
    return output[mask.bool()] if probe.token_output else output


def check_finite(subject: Subject, probe: LossProbe) -> None:
    """The output is a finite 0-d float tensor (for token outputs: finite at selected positions)."""
    for seed in SEEDS:
        prep = _prepare(subject, probe, seed)
        output, _, _ = _call(probe, prep, prep.inputs)
        mask = prep.inputs["action_mask"]
        if probe.token_output:
            if output.shape != mask.shape:
                raise ConformanceError(
                    f"{probe.what} returned shape {tuple(output.shape)} for inputs of shape "
                    f"{tuple(mask.shape)}",
                    "return one value per token, shaped like the inputs",
                )
        elif output.dim() != 0 or not output.is_floating_point():
            raise ConformanceError(
                f"{probe.what} returned a {output.dtype} tensor of shape {tuple(output.shape)}",
                "reduce to a 0-d float loss, e.g. with self.aggregate(per_token, action_mask)",
            )
        values = _selected(probe, output, mask).detach()
        if not bool(torch.isfinite(values).all()):
            raise ConformanceError(
                f"{probe.what} returned non-finite values {values.flatten()[:8].tolist()} on finite inputs "
                f"(seed {seed})",
                "guard divisions (clamp denominators) and exponentials (clamp log-ratios)",
            )


def check_differentiable(subject: Subject, probe: LossProbe) -> None:
    """The loss has a gradient with respect to its differentiable inputs, and it is finite."""
    for seed in SEEDS:
        prep = _prepare(subject, probe, seed)
        loss, _, leaves = _call(probe, prep, prep.inputs)
        if not loss.requires_grad:
            raise ConformanceError(
                f"{probe.what} returned a loss that does not require grad (inputs requiring grad: "
                f"{', '.join(leaves)})",
                "compute the loss from the inputs with differentiable torch operations; do not detach it",
            )
        torch.autograd.backward(loss)
        for name, leaf in leaves.items():
            if leaf.grad is None:
                raise ConformanceError(
                    f"no gradient reaches {name!r} (seed {seed})",
                    f"make the loss depend on {name} through differentiable operations",
                )
            if not bool(torch.isfinite(leaf.grad).all()):
                raise ConformanceError(
                    f"the gradient of {name!r} has non-finite entries (seed {seed})",
                    "avoid operations with infinite derivatives at the inputs (sqrt(0), log(0), clamp edges)",
                )


def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), rtol=RTOL, atol=ATOL))


def check_masked_ignored(subject: Subject, probe: LossProbe) -> None:
    """NaN/inf planted at masked positions of every input change neither the output, the metrics nor the
    gradient."""
    for seed in SEEDS:
        prep = _prepare(subject, probe, seed)
        mask = prep.inputs["action_mask"]
        clean_out, clean_metrics, clean_leaves = _call(probe, prep, prep.inputs)
        prep_dirty = _prepare(subject, probe, seed)
        dirty_inputs = plant_masked(prep_dirty.inputs, mask)
        dirty_out, dirty_metrics, dirty_leaves = _call(probe, prep_dirty, dirty_inputs)
        planted = [k for k in dirty_inputs if dirty_inputs[k] is not prep_dirty.inputs[k]]
        fix = (
            "select before computing: torch.where(mask, x, 0) (or trinity_core.ops.masked_* / "
            "self.aggregate); multiplying by the mask gives 0 * nan = nan"
        )
        clean_sel = _selected(probe, clean_out, mask).detach()
        dirty_sel = _selected(probe, dirty_out, mask).detach()
        if not _close(clean_sel, dirty_sel):
            raise ConformanceError(
                f"{probe.what} changed from {clean_sel.flatten()[:6].tolist()} to "
                f"{dirty_sel.flatten()[:6].tolist()} when NaN/inf were planted at masked positions of "
                f"{planted} (seed {seed})",
                fix,
            )
        for key, value in clean_metrics.items():
            other = dirty_metrics.get(key)
            if isinstance(value, Tensor) and isinstance(other, Tensor) and not _close(value, other):
                raise ConformanceError(
                    f"metric {key!r} changed from {value.tolist()} to {other.tolist()} when NaN/inf were "
                    f"planted at masked positions (seed {seed})",
                    fix,
                )
        if not probe.grad_inputs:
            continue
        torch.autograd.backward(clean_out)
        torch.autograd.backward(dirty_out)
        for name in probe.grad_inputs:
            grad, dirty_grad = clean_leaves[name].grad, dirty_leaves[name].grad
            if grad is None or dirty_grad is None:
                continue  # check_differentiable reports a missing gradient
            if not bool(torch.isfinite(dirty_grad).all()) or not _close(grad, dirty_grad):
                raise ConformanceError(
                    f"NaN/inf planted at masked positions leak into the gradient of {name!r} (seed {seed})",
                    fix,
                )


def check_detached_metrics(subject: Subject, probe: LossProbe) -> None:
    """Metrics are a dict of str to detached 0-d tensors."""
    prep = _prepare(subject, probe, SEEDS[0])
    _, metrics, _ = _call(probe, prep, prep.inputs)
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise ConformanceError(f"metric key {key!r} is not a string", "name metrics with strings")
        if not isinstance(value, Tensor):
            raise ConformanceError(
                f"metric {key!r} is a {type(value).__name__} ({value!r}), not a tensor",
                "return metrics as 0-d tensors (value.detach()); a Python number needs a host sync "
                "(.item()) per call, the trainer materialises all metrics once per step",
            )
        if value.dim() != 0:
            raise ConformanceError(
                f"metric {key!r} has shape {tuple(value.shape)}, not a 0-d tensor",
                "reduce the metric to a scalar (e.g. .mean()) before returning it",
            )
        if value.requires_grad or value.grad_fn is not None:
            raise ConformanceError(
                f"metric {key!r} is attached to the autograd graph (grad_fn={value.grad_fn})",
                "return value.detach(): an attached metric keeps the whole graph alive until logged",
            )


def check_no_host_sync(subject: Subject, probe: LossProbe) -> None:
    """The call makes no host synchronisation (.item(), .tolist(), .cpu(), bool(tensor), ...)."""
    prep = _prepare(subject, probe, SEEDS[0])
    with count_host_syncs() as log:
        _call(probe, prep, prep.inputs)
    if len(log):
        raise ConformanceError(
            f"{probe.what} made {len(log)} host synchronisation(s):\n{log.describe()}",
            "keep values on the device: return metrics as 0-d tensors (x.detach()), use torch.where / "
            "clamp instead of Python `if` on tensors, never .item(), .tolist(), .cpu() or float(tensor)",
        )
