"""Checks of entropy losses: ``loss(entropy, action_mask, **kwargs) -> (loss, metrics)``.

Gradients must reach ``entropy``. Inputs a component declares through ``conformance_inputs`` beyond the
generated ones are passed as keyword arguments.
"""

from __future__ import annotations

from typing import Any

from trinity_core.components._aggregation import declared_parameters
from trinity_core.testing import _loss
from trinity_core.testing._core import Subject, check
from trinity_core.testing._inputs import LOSS_INPUT_NAMES
from trinity_core.testing.common import BUILT

__all__ = ["PROBE"]


def _invoke(instance: Any, inputs: dict[str, Any], extra: tuple[str, ...]) -> Any:
    # Pass every kit-generated input the loss declares by name (e.g. ``expert_mask`` of ``mix``).
    named = {
        name: inputs[name]
        for name in declared_parameters(type(instance).__call__)
        if name in LOSS_INPUT_NAMES and name not in ("entropy", "action_mask") and name in inputs
    }
    return instance(inputs["entropy"], inputs["action_mask"], **named, **{k: inputs[k] for k in extra})


PROBE = _loss.LossProbe(
    "entropy loss __call__", _invoke, lambda _: ["entropy", "action_mask"], grad_inputs=("entropy",)
)
"""How the kit calls an entropy loss."""


@check("entropy_loss", requires=BUILT)
def check_entropy_loss_is_finite(subject: Subject) -> None:
    """the loss is a finite 0-d tensor on random inputs"""
    _loss.check_finite(subject, PROBE)


@check("entropy_loss", requires=BUILT)
def check_entropy_loss_is_differentiable(subject: Subject) -> None:
    """the gradient reaches entropy and is finite"""
    _loss.check_differentiable(subject, PROBE)


@check("entropy_loss", requires=BUILT)
def check_entropy_masked_positions_ignored(subject: Subject) -> None:
    """NaN/inf at masked positions change neither loss, metrics nor gradient"""
    _loss.check_masked_ignored(subject, PROBE)


@check("entropy_loss", requires=BUILT)
def check_entropy_metrics_are_detached_scalars(subject: Subject) -> None:
    """metrics are detached 0-d tensors"""
    _loss.check_detached_metrics(subject, PROBE)


@check("entropy_loss", requires=BUILT)
def check_entropy_no_host_sync(subject: Subject) -> None:
    """the loss call makes no host synchronisation"""
    _loss.check_no_host_sync(subject, PROBE)
