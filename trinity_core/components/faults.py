"""A component that misbehaves during a run ends it with one line: which component, from which
distribution, and what it did (raised, exited, returned something unusable or non-finite).

The line is made where the fault is produced: :func:`call_component` wraps the call (an exception or a
``sys.exit`` inside a plugin), :func:`checked_loss` checks what a loss returned (type, shape, gradient),
and non-finite values are flagged on the device (:func:`finite_flag`, no host sync) and checked once per
step with the step's metrics (:func:`raise_on_non_finite`), before anything of the step is checkpointed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
from torch import Tensor

from trinity_core.registry.core import IN_PROCESS
from trinity_core.registry.errors import PluginError

__all__ = [
    "FINITE_PREFIX",
    "ComponentFault",
    "call_component",
    "checked_loss",
    "component_label",
    "finite_flag",
    "raise_on_non_finite",
]

_T = TypeVar("_T")

FINITE_PREFIX = "_finite/"
"""Metric keys ``_finite/<kind>``: 1.0 when every value that kind of component produced this step was
finite; read and removed by :func:`raise_on_non_finite`."""

_STAGES = ("add_strategy", "advantage_fn", "kl_fn", "value_loss", "policy_loss", "entropy_loss")
"""The kinds in the order they act on a step's data: the first non-finite one is the cause."""

_WORDS = {
    "policy_loss": "policy loss",
    "kl_fn": "KL function",
    "entropy_loss": "entropy loss",
    "advantage_fn": "advantage function",
    "add_strategy": "add strategy",
    "value_loss": "value loss",
    "task_selector": "task selector",
    "operator": "experience operator",
    "priority_fn": "priority function",
}


class ComponentFault(PluginError):
    """A component raised, exited, or returned something unusable or non-finite during a run."""


def component_label(kind: str, component: Any) -> str:
    """``policy loss 'ppo' (trinity-plugin-ppo 0.1.0)``: the kind, registered name and distribution."""
    from trinity_core import registry

    name_of = getattr(type(component), "name", None)
    name = str(name_of()) if callable(name_of) else type(component).__name__
    try:
        origin = registry.record(kind, name).entry_point
    except PluginError:
        return f"{_WORDS.get(kind, kind)} {name!r}"
    where = "registered in this process" if origin.distribution == IN_PROCESS else origin.provider
    return f"{_WORDS.get(kind, kind)} {name!r} ({where})"


def call_component(kind: str, component: Any, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)``, a method of ``component``; an exception or ``sys.exit`` inside it becomes a
    :class:`ComponentFault` naming the component (the original exception is its cause)."""
    try:
        return fn(*args, **kwargs)
    except ComponentFault:
        raise
    except SystemExit as exc:
        raise ComponentFault(
            f"{component_label(kind, component)} called sys.exit({exc.code!r}); a component raises an "
            "exception with its reason instead"
        ) from None
    except Exception as exc:
        raise ComponentFault(
            f"{component_label(kind, component)} raised {type(exc).__name__}: {exc}"
        ) from exc


def checked_loss(kind: str, component: Any, result: Any, logprob: Tensor) -> tuple[Tensor, dict[str, Any]]:
    """``(loss, metrics)`` as a loss component returned them, checked: a 0-d tensor that carries the
    gradient of ``logprob`` (when that needs one), and a dict of metrics."""
    label = component_label(kind, component)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ComponentFault(f"{label} returned {type(result).__name__}; return (loss, metrics)")
    loss, metrics = result
    if not isinstance(loss, Tensor):
        raise ComponentFault(f"{label} returned a loss of type {type(loss).__name__}; return a 0-d tensor")
    if loss.numel() != 1:
        raise ComponentFault(f"{label} returned a loss of shape {tuple(loss.shape)}; return a 0-d tensor")
    if logprob.requires_grad and torch.is_grad_enabled() and not loss.requires_grad:
        raise ComponentFault(
            f"{label} returned a loss without a gradient (detached from the log-probs): the update would "
            "not change the policy; compute it from logprob without .detach() or torch.no_grad()"
        )
    if not isinstance(metrics, Mapping):
        raise ComponentFault(f"{label} returned metrics of type {type(metrics).__name__}; return a dict")
    return loss.reshape(()), dict(metrics)


def finite_flag(kind: str, value: Tensor) -> tuple[str, Tensor]:
    """The metric ``(_finite/<kind>, 1.0 or 0.0)`` of ``value``: whether all of it is finite (on its
    device: no host sync)."""
    return f"{FINITE_PREFIX}{kind}", torch.isfinite(value.detach()).all().to(torch.float64)


def raise_on_non_finite(metrics: dict[str, float], labels: Mapping[str, str], step: int) -> None:
    """Remove the ``_finite/<kind>`` flags from ``metrics``; raise when one is below 1.

    Args:
        metrics: the step's metrics as floats (reduced over ranks: a flag below 1 on any rank shows).
        labels: ``kind -> component label`` (:func:`component_label`) for the message.
        step: the 0-based step, for the message.

    Raises:
        ComponentFault: naming the component that produced a NaN or infinite value.
    """
    flags = {
        k[len(FINITE_PREFIX) :]: metrics.pop(k) for k in [k for k in metrics if k.startswith(FINITE_PREFIX)]
    }
    order = {kind: i for i, kind in enumerate(_STAGES)}
    bad = sorted(
        (kind for kind, value in flags.items() if not value >= 1.0), key=lambda k: order.get(k, len(order))
    )
    if bad:
        what = {"advantage_fn": "advantages", "add_strategy": "advantages"}
        found = "; ".join(
            f"{labels.get(k, k)} produced non-finite {what.get(k, 'loss')} (NaN or inf)" for k in bad
        )
        # The first in pipeline order is where the values went bad; the later ones followed from it.
        raise ComponentFault(f"step {step + 1}: {found}; the step was not checkpointed")
