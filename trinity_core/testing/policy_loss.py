"""Checks of policy losses: ``loss(logprob=..., **batch[select_keys]) -> (loss, metrics)``.

The kit passes the inputs under the backend's names (``select_keys``, verl by default), as the trainer
does; gradients must reach ``logprob``.
"""

from __future__ import annotations

from typing import Any

from trinity_core.testing import _loss
from trinity_core.testing._core import Subject, check

__all__ = ["PROBE"]


def _needs(instance: Any) -> list[str]:
    return ["logprob", *(instance.mapper.to_trinity(key) for key in instance.select_keys)]


def _invoke(instance: Any, inputs: dict[str, Any], extra: tuple[str, ...]) -> Any:
    batch = {key: inputs[instance.mapper.to_trinity(key)] for key in instance.select_keys}
    return instance(logprob=inputs["logprob"], **batch)


PROBE = _loss.LossProbe("policy loss __call__", _invoke, _needs)
"""How the kit calls a policy loss."""


@check("policy_loss")
def check_loss_is_finite(subject: Subject) -> None:
    """the loss is a finite 0-d tensor on random inputs"""
    _loss.check_finite(subject, PROBE)


@check("policy_loss")
def check_loss_is_differentiable(subject: Subject) -> None:
    """the gradient reaches logprob and is finite"""
    _loss.check_differentiable(subject, PROBE)


@check("policy_loss")
def check_masked_positions_ignored(subject: Subject) -> None:
    """NaN/inf at masked positions change neither loss, metrics nor gradient"""
    _loss.check_masked_ignored(subject, PROBE)


@check("policy_loss")
def check_metrics_are_detached_scalars(subject: Subject) -> None:
    """metrics are detached 0-d tensors"""
    _loss.check_detached_metrics(subject, PROBE)


@check("policy_loss")
def check_no_host_sync(subject: Subject) -> None:
    """the loss call makes no host synchronisation"""
    _loss.check_no_host_sync(subject, PROBE)
