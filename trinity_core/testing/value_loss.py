"""Checks of value losses: ``loss(vpreds, values, returns, action_mask, **kwargs) -> (loss, metrics)``.

Gradients must reach ``vpreds`` (the critic's predictions); with the step's global normalizers
(``loss_scale=``) the gradient must not depend on how the rows are cut into micro-batches. Inputs a
component declares through ``conformance_inputs`` beyond the generated ones are passed as keyword
arguments.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trinity_core.ops import LOSS_AGG_MODES, global_normalizers
from trinity_core.testing import _loss
from trinity_core.testing._core import ConformanceError, Subject, check
from trinity_core.testing._inputs import loss_inputs
from trinity_core.testing.common import BUILT, runtime_objects

__all__ = ["PROBE"]

_POSITIONAL = ("vpreds", "values", "returns", "action_mask")


def _invoke(instance: Any, inputs: dict[str, Any], extra: tuple[str, ...]) -> Any:
    return instance(*(inputs[k] for k in _POSITIONAL), **{k: inputs[k] for k in extra})


PROBE = _loss.LossProbe("value loss __call__", _invoke, lambda _: list(_POSITIONAL), grad_inputs=("vpreds",))
"""How the kit calls a value loss."""


@check("value_loss", requires=BUILT)
def check_value_loss_is_finite(subject: Subject) -> None:
    """the loss is a finite 0-d tensor on random inputs"""
    _loss.check_finite(subject, PROBE)


@check("value_loss", requires=BUILT)
def check_value_loss_is_differentiable(subject: Subject) -> None:
    """the gradient reaches vpreds and is finite"""
    _loss.check_differentiable(subject, PROBE)


@check("value_loss", requires=BUILT)
def check_value_masked_positions_ignored(subject: Subject) -> None:
    """NaN/inf at masked positions change neither loss, metrics nor gradient"""
    _loss.check_masked_ignored(subject, PROBE)


@check("value_loss", requires=BUILT)
def check_value_metrics_are_detached_scalars(subject: Subject) -> None:
    """metrics are detached 0-d tensors"""
    _loss.check_detached_metrics(subject, PROBE)


@check("value_loss", requires=BUILT)
def check_value_no_host_sync(subject: Subject) -> None:
    """the loss call makes no host synchronisation"""
    _loss.check_no_host_sync(subject, PROBE)


@check("value_loss", requires=BUILT)
def check_value_loss_zero_at_the_returns(subject: Subject) -> None:
    """predictions equal to the returns (and old values equal to both) give loss 0 and gradient 0"""
    instance = subject.build(**runtime_objects(subject))
    inputs = loss_inputs(0)
    target = inputs["returns"]
    vpreds = target.clone().requires_grad_(True)
    loss, _ = instance(vpreds, target.clone(), target.clone(), inputs["action_mask"])
    loss.backward()
    grad = vpreds.grad if vpreds.grad is not None else torch.zeros_like(target)
    value, steepest = float(loss.detach()), float(grad.abs().max())
    if abs(value) > 1e-7 or steepest > 1e-7:
        raise ConformanceError(
            f"a perfect critic (vpreds = values = returns) gives loss {value:.3g} and gradient max "
            f"{steepest:.3g}",
            "compute the loss from vpreds - returns (a value loss fits the returns)",
        )


def _modes(cls: Any) -> tuple[str | None, ...]:
    fields = getattr(getattr(cls, "Args", None), "model_fields", {})
    return tuple(LOSS_AGG_MODES) if "loss_agg_mode" in fields else (None,)


def _split_gradient(instance: Any, inputs: dict[str, Tensor], parts: list[slice]) -> Tensor:
    """Gradient of ``vpreds``: the rows cut into ``parts``, each called with the step's normalizers."""
    mask = inputs["action_mask"]
    vpreds = inputs["vpreds"].clone().requires_grad_(True)
    scale = global_normalizers([mask[p] for p in parts], max_tokens=mask.shape[1], all_reduce=False)
    total = sum(
        instance(*(vpreds[p] if k == "vpreds" else inputs[k][p] for k in _POSITIONAL), loss_scale=scale)[0]
        for p in parts
    )
    (grad,) = torch.autograd.grad(total, vpreds)
    return grad


@check("value_loss", requires=BUILT)
def check_value_microbatch_invariant(subject: Subject) -> None:
    """with the step's global normalizers, two micro-batches give the whole batch's gradient (1e-6)"""
    cut = 2
    for seed in _loss.SEEDS:
        inputs = {k: v.double() if v.is_floating_point() else v for k, v in loss_inputs(seed).items()}
        for mode in _modes(subject.obj):
            args = {} if mode is None else {"loss_agg_mode": mode}
            instance = subject.obj.from_args({**subject.args, **args}, **runtime_objects(subject))
            whole = _split_gradient(instance, inputs, [slice(None)])
            split = _split_gradient(instance, inputs, [slice(0, cut), slice(cut, None)])
            error = float((split - whole).abs().max() / whole.abs().max().clamp_min(1e-30))
            if error > 1e-6:
                raise ConformanceError(
                    f"loss_agg_mode {mode}: the gradient of two micro-batches (rows [0, {cut}) and "
                    f"[{cut}, B)) differs from the whole batch's by {error:.2e} (relative, max norm)",
                    "aggregate with self.aggregate (it applies the loss_scale the trainer passes) and "
                    "compute nothing across rows outside it",
                )
