"""What every component has in common: validated arguments, a registered name, a summary, metrics.

A *component* is one class that implements one contract (an advantage function, a policy loss, ...).
Its arguments are declared once, as a pydantic model named ``Args`` beside the class; everything else
derives from it:

* :meth:`Component.default_args` (trinity-rft's ``default_args()``) is ``Args().model_dump()``;
* :meth:`Component.validate_args` merges user arguments per key over those defaults, rejects unknown keys
  and checks types and constraints;
* :meth:`Component.from_args` builds an instance from validated arguments plus runtime objects.

Classes written in trinity-rft's style, with a hand-written ``default_args()`` and no ``Args``, still work:
an ``Args`` model is synthesised from their defaults, so unknown keys are rejected for them too (values
are not type-checked, since a default alone does not say which types are acceptable).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import pydantic
import torch
from pydantic import BaseModel, ConfigDict
from torch import Tensor

__all__ = [
    "Component",
    "ComponentArgs",
    "MetricValue",
    "Metrics",
    "aggregate_metrics",
    "materialize_metrics",
    "summarize_masked_metric",
    "summarize_metric",
]

MetricValue = float | int | Tensor
"""A metric: a Python number or a 0-d tensor (preferred in hot paths: no host synchronisation)."""
Metrics = dict[str, Any]
"""Metric name to :data:`MetricValue`."""


class ComponentArgs(BaseModel):
    """Base of every component's ``Args`` model.

    Unknown keys are rejected (``extra="forbid"``) and assignments are re-validated. Every field of a
    subclass has a default, a ``description`` and constraints where meaningful, e.g.::

        class Args(ComponentArgs):
            epsilon: float = Field(1e-6, gt=0, description="Added to the group std before dividing.")
    """

    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=True)


def _legacy_args_model(cls: type, defaults: Mapping[str, Any]) -> type[ComponentArgs]:
    """An ``Args`` model with one untyped field per key of a hand-written ``default_args()``."""
    fields: dict[str, Any] = {
        key: (Any, pydantic.Field(default=value, description=f"{key} (from {cls.__name__}.default_args())"))
        for key, value in defaults.items()
    }
    model: type[ComponentArgs] = pydantic.create_model(
        f"{cls.__name__}Args", __base__=ComponentArgs, __module__=cls.__module__, **fields
    )
    return model


def _first_line(doc: str | None) -> str:
    if not doc:
        return ""
    for line in inspect.cleandoc(doc).splitlines():
        if line.strip():
            return line.strip()
    return ""


class Component:
    """Mixin of every component class: ``Args``, ``default_args``, ``validate_args``, ``from_args``, names.

    Construction validates the keyword arguments against ``Args`` (defaults filled per key) and stores
    the result as ``self.args``; each field is also set as an instance attribute (``self.epsilon``), so
    component code reads its settings directly. Subclasses normally need no ``__init__``; one that
    defines it passes its arguments on: ``super().__init__(**args)``.
    """

    kind: ClassVar[str] = "component"
    """The contract implemented (``"advantage_fn"``, ``"policy_loss"``, ...); set on each base class."""
    Args: ClassVar[type[ComponentArgs]] = ComponentArgs
    """The pydantic model of the constructor arguments (empty by default)."""
    paper: ClassVar[str | None] = None
    """Citation or URL of the method, shown in listings."""
    requires: ClassVar[frozenset[str]] = frozenset()
    """What a run must provide for this component: parts among ``critic``, ``reference``, ``teacher``,
    ``expert_data``, or batch columns (``values``, ``teacher_logprobs``, ...). ``trinity config
    validate`` and ``trinity train`` refuse a run that lacks one (:mod:`trinity_core.config.capabilities`)."""

    args: ComponentArgs
    """The validated arguments of this instance."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "default_args" in cls.__dict__ and "Args" not in cls.__dict__:
            # A trinity-rft-style class: hand-written defaults. Derive Args from them (keys only).
            defaults = cls.default_args()
            if not isinstance(defaults, Mapping):
                raise TypeError(f"{cls.__qualname__}.default_args() must return a dict, got {defaults!r}")
            cls.Args = _legacy_args_model(cls, defaults)

    def __init__(self, **args: Any) -> None:
        self._set_args(args)

    def _set_args(self, args: Mapping[str, Any]) -> None:
        validated = type(self).validate_args(args)
        self.args = validated
        cls = type(self)
        for key, value in validated:
            # Never shadow a property (e.g. KLFn.kl_coef) with a plain attribute.
            if isinstance(inspect.getattr_static(cls, key, None), property):
                continue
            setattr(self, key, value)

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """The default arguments: ``cls.Args().model_dump()``."""
        return cls.Args().model_dump()

    @classmethod
    def validate_args(cls, args: Mapping[str, Any] | ComponentArgs | None) -> ComponentArgs:
        """Merge ``args`` per key over the defaults and validate them.

        Raises:
            pydantic.ValidationError: an unknown key, a wrong type or a violated constraint; the error
                names the field.
        """
        if args is None:
            return cls.Args()
        if isinstance(args, cls.Args):
            return args
        if isinstance(args, ComponentArgs):
            args = args.model_dump(exclude_unset=True)
        if not isinstance(args, Mapping):
            raise TypeError(
                f"arguments of {cls.kind} {cls.name()!r} must be a mapping of name to value, got "
                f"{type(args).__name__}"
            )
        return cls.Args.model_validate(dict(args))

    @classmethod
    def from_args(cls, args: Mapping[str, Any] | ComponentArgs | None = None, **extra: Any) -> Any:
        """Build an instance: ``cls(**validated_args, **extra)``.

        ``extra`` carries runtime objects that are not configuration, such as the ``writer`` of an add
        strategy or the ``backend`` of a policy loss.
        """
        validated = cls.validate_args(args)
        return cls(**validated.model_dump(), **extra)

    @classmethod
    def name(cls) -> str:
        """The registered name (set by the registry as ``cls._name``), else the class name.

        Only the class's own ``_name`` counts: an unregistered subclass of a registered class reports
        its own class name, not its parent's registered name.
        """
        registered = cls.__dict__.get("_name")
        return registered if isinstance(registered, str) else cls.__name__

    @classmethod
    def summary(cls) -> str:
        """The first line of the class's own docstring ("" when it has none)."""
        return _first_line(cls.__doc__)


def _as_float64(value: MetricValue) -> Tensor:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"a metric must be a scalar, got a tensor of shape {tuple(value.shape)}")
        return value.detach().reshape(()).to(torch.float64)
    return torch.tensor(float(value), dtype=torch.float64)


_AGGREGATIONS = ("mean", "max", "min", "sum", "last")


def _is_number(value: Any) -> bool:
    if isinstance(value, Tensor):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, int | float)


def aggregate_metrics(metric_list: Iterable[Mapping[str, Any]], prefix: str) -> dict[str, Tensor]:
    """Summarise a list of metric dicts (e.g. one per group) into one flat dict of 0-d float64 tensors.

    A key ``name`` (or ``name:mean``) yields ``{prefix}/{name}/mean``, ``/max`` and ``/min``; a key
    ``name:sum``, ``name:max``, ``name:min`` or ``name:last`` yields only ``{prefix}/{name}/{agg}``.
    Non-numeric values are ignored; an empty list gives ``{}``. Tensors are stacked, never moved to the
    host.
    """
    collected: dict[tuple[str, str | None], list[Tensor]] = {}
    for metrics in metric_list:
        for key, value in metrics.items():
            if not _is_number(value):
                continue
            name, _, agg = key.partition(":")
            if agg and agg not in _AGGREGATIONS:
                raise ValueError(
                    f"aggregate_metrics: metric {key!r} asks for aggregation {agg!r}; use one of "
                    f"{', '.join(_AGGREGATIONS)}"
                )
            collected.setdefault((name, None if agg in ("", "mean") else agg), []).append(_as_float64(value))
    out: dict[str, Tensor] = {}
    for (name, how), values in collected.items():
        stacked = torch.stack([v.to(values[0].device) for v in values])
        if how is None:
            out.update(summarize_metric(stacked, name, prefix))
        elif how == "last":
            out[f"{prefix}/{name}/last"] = stacked[-1]
        else:
            out[f"{prefix}/{name}/{how}"] = getattr(stacked, how)()
    return out


def summarize_metric(values: Tensor, name: str, prefix: str) -> dict[str, Tensor]:
    """``{prefix}/{name}/mean``, ``/max`` and ``/min`` of a 1-D tensor, as 0-d float64 tensors.

    The vectorized twin of :func:`aggregate_metrics` for values computed per group in one tensor. An
    empty tensor gives ``{}``.
    """
    if values.numel() == 0:
        return {}
    v = values.detach().reshape(-1).to(torch.float64)
    return {
        f"{prefix}/{name}/mean": v.mean(),
        f"{prefix}/{name}/max": v.max(),
        f"{prefix}/{name}/min": v.min(),
    }


def summarize_masked_metric(values: Tensor, mask: Tensor, name: str, prefix: str) -> dict[str, Tensor]:
    """``{prefix}/{name}/mean``, ``/max`` and ``/min`` of ``values[mask]`` as 0-d float64 tensors.

    Like :func:`summarize_metric` over the selected entries only (e.g. groups with at least two members),
    computed with ``torch.where`` rather than boolean indexing so nothing waits on a host read; every
    value is 0 when nothing is selected.
    """
    v = values.detach().to(torch.float64)
    n = mask.sum()
    total = torch.where(mask, v, 0.0).sum()
    if v.numel() == 0:
        return {f"{prefix}/{name}/{agg}": total for agg in ("mean", "max", "min")}
    return {
        f"{prefix}/{name}/mean": total / n.clamp_min(1).to(torch.float64),
        f"{prefix}/{name}/max": torch.where(n > 0, torch.where(mask, v, -torch.inf).amax(), 0.0),
        f"{prefix}/{name}/min": torch.where(n > 0, torch.where(mask, v, torch.inf).amin(), 0.0),
    }


def materialize_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Turn metrics into Python floats with one host transfer per device (call once per step).

    Non-numeric values are dropped.
    """
    out: dict[str, float] = {}
    by_device: dict[torch.device, list[tuple[str, Tensor]]] = {}
    for key, value in metrics.items():
        if isinstance(value, Tensor):
            if value.numel() == 1:
                by_device.setdefault(value.device, []).append((key, value.detach().reshape(())))
        elif isinstance(value, bool | int | float):
            out[key] = float(value)
    for items in by_device.values():
        stacked = torch.stack([t.to(torch.float64) for _, t in items]).tolist()
        out.update({key: float(v) for (key, _), v in zip(items, stacked, strict=True)})
    return out
