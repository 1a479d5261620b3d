"""Checks every component passes: documented, validated arguments; builds on a machine without a GPU;
honest opt-outs; a name no other installed distribution claims.

The checks that call the component name ``builds_without_gpu`` as their precondition (:data:`BUILT`),
which in turn needs ``args_validate_with_defaults``: a broken ``Args`` default fails one check, and the
others that would only repeat it are skipped with that reason."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pydantic
import torch

from trinity_core.registry import kinds
from trinity_core.registry.args import default_problems
from trinity_core.testing._core import OPT_OUT_ATTRIBUTE, ConformanceError, Subject, check, check_names

__all__ = [
    "ALL_KINDS",
    "BUILT",
    "COMPONENT_KINDS",
    "no_gpu",
    "runtime_objects",
]

COMPONENT_KINDS = (
    "advantage_fn",
    "add_strategy",
    "policy_loss",
    "kl_fn",
    "entropy_loss",
    "value_loss",
    "task",
    "task_selector",
    "operator",
    "priority_fn",
    "tool_parser",
)
"""Kinds whose classes take arguments (``Args``); algorithms are presets without arguments."""
ALL_KINDS = ("algorithm", *COMPONENT_KINDS)

BUILT: tuple[str, ...] = ("builds_without_gpu",)
"""The precondition of every check that builds the component and calls it."""
DEFAULTS_VALID: tuple[str, ...] = ("args_validate_with_defaults",)
"""The precondition of the checks that instantiate ``Args``."""

UNKNOWN_KEY = "conformance_unknown_key"
"""An argument name no component declares; validation must reject it by name."""

_ARGS_FIX = (
    "declare the arguments as `class Args(ComponentArgs)` (trinity_core.components.ComponentArgs: "
    "extra='forbid'), every field with a default and Field(description=...)"
)


@check(*ALL_KINDS)
def check_has_summary(subject: Subject) -> None:
    """the class docstring gives a one-line summary"""
    summary = subject.obj.summary()
    if not isinstance(summary, str) or not summary.strip():
        raise ConformanceError(
            f"{subject.obj.__qualname__}.summary() is {summary!r}; listings (`trinity plugins`) show it",
            "give the class a docstring whose first line says what it computes (and the formula)",
        )


@check(*ALL_KINDS, skippable=False)
def check_opt_outs_are_valid(subject: Subject) -> None:
    """conformance_skip names existing checks and gives a reason for each"""
    declared = getattr(subject.obj, OPT_OUT_ATTRIBUTE, None)
    if declared is None:
        return
    if not isinstance(declared, Mapping):
        raise ConformanceError(
            f"{OPT_OUT_ATTRIBUTE} is a {type(declared).__name__}, not a dict",
            f"write {OPT_OUT_ATTRIBUTE} = {{'<check name>': '<why this component differs>'}}",
        )
    known = check_names(subject.kind)
    for name, reason in declared.items():
        if name not in known:
            raise ConformanceError(
                f"{OPT_OUT_ATTRIBUTE} names unknown check {name!r}; checks of a {subject.title}: "
                f"{', '.join(known)}",
                "fix the check name (typos would silently keep a check running or hide a skip)",
            )
        if not isinstance(reason, str) or not reason.strip():
            raise ConformanceError(
                f"{OPT_OUT_ATTRIBUTE}[{name!r}] has no reason ({reason!r})",
                "give the reason as a non-empty string; it is shown in the test report",
            )


@check(*COMPONENT_KINDS)
def check_args_model_forbids_unknown_keys(subject: Subject) -> None:
    """Args is a pydantic model with extra='forbid'"""
    model = getattr(subject.obj, "Args", None)
    if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
        raise ConformanceError(
            f"{subject.obj.__qualname__}.Args is {model!r}, not a pydantic model", _ARGS_FIX
        )
    extra = model.model_config.get("extra")
    if extra != "forbid":
        raise ConformanceError(
            f"{model.__qualname__}.model_config has extra={extra!r}: a misspelt argument in a config "
            f"would be silently ignored",
            _ARGS_FIX,
        )


@check(*COMPONENT_KINDS)
def check_args_validate_with_defaults(subject: Subject) -> None:
    """Args() validates with every field defaulted, each default meets its own constraints, and the
    test's overrides validate"""
    model = subject.obj.Args
    try:
        model()
    except pydantic.ValidationError as exc:
        raise ConformanceError(
            f"{model.__qualname__}() fails without arguments: {exc}", "give every field a default"
        ) from None
    broken = default_problems(model)
    if broken:
        raise ConformanceError(
            f"{model.__qualname__} defaults break their own constraints: "
            + "; ".join(f"{field}: {msg}" for field, msg in broken),
            "make each default satisfy its Field constraints (gt/ge/le/Literal...), or change the "
            "constraint; pydantic does not validate defaults, so `trinity train` would fail only when "
            "the component is built",
        )
    for args in ({}, dict(subject.args)):
        try:
            subject.obj.validate_args(args)
        except pydantic.ValidationError as exc:
            raise ConformanceError(
                f"{subject.obj.__qualname__}.validate_args({args!r}) fails: {exc}",
                "defaults must satisfy the field constraints; fix the default or the test's `args`",
            ) from None


@check(*COMPONENT_KINDS)
def check_args_reject_unknown_keys(subject: Subject) -> None:
    """an unknown argument is rejected by validate_args and the error names it"""
    try:
        subject.obj.validate_args({UNKNOWN_KEY: 1})
    except pydantic.ValidationError as exc:
        if UNKNOWN_KEY not in str(exc):
            raise ConformanceError(
                f"validate_args rejected {UNKNOWN_KEY!r} but the error does not name it: {exc}",
                "let pydantic report extra keys (extra='forbid'); do not replace its message",
            ) from None
        return
    except Exception as exc:
        raise ConformanceError(
            f"validate_args({{{UNKNOWN_KEY!r}: 1}}) raised {type(exc).__name__} ({exc}), not "
            f"pydantic.ValidationError",
            "keep Component.validate_args; configuration errors are reported from ValidationError",
        ) from None
    raise ConformanceError(f"validate_args accepted the unknown key {UNKNOWN_KEY!r}", _ARGS_FIX)


@check(*COMPONENT_KINDS, requires=DEFAULTS_VALID)
def check_default_args_match_args(subject: Subject) -> None:
    """default_args() equals Args().model_dump()"""
    expected = subject.obj.Args().model_dump()
    got = subject.obj.default_args()
    if got != expected:
        raise ConformanceError(
            f"default_args() returns {got!r} but Args().model_dump() is {expected!r}",
            "do not override default_args(); defaults live in the Args fields only",
        )


@check(*COMPONENT_KINDS)
def check_args_fields_documented(subject: Subject) -> None:
    """every Args field has a description"""
    model = subject.obj.Args
    missing = [name for name, info in model.model_fields.items() if not (info.description or "").strip()]
    if missing:
        raise ConformanceError(
            f"{model.__qualname__} fields without a description: {', '.join(missing)}",
            "add Field(..., description='<meaning, unit, range>') to each; `trinity config` shows them",
        )


def runtime_objects(subject: Subject) -> dict[str, Any]:
    """Runtime keyword arguments a component of ``subject.kind`` is built with (not configuration)."""
    if subject.kind == "policy_loss":
        return {"backend": "verl"}
    if subject.kind == "add_strategy":
        from trinity_core.buffer import make_buffer

        return {"writer": make_buffer("memory").writer}
    if subject.kind == "task_selector":
        return {"size": 8}
    if subject.kind == "operator":
        from trinity_core.components import OperatorContext

        return {"context": OperatorContext(group_size=4, max_new_tokens=8)}
    return {}


def _refuse_cuda(*args: Any, **kwargs: Any) -> None:
    raise ConformanceError(
        "the component initialised CUDA while being built",
        "create tensors lazily, on the device of the inputs of each call (Accelerate owns the device)",
    )


@contextmanager
def no_gpu() -> Iterator[None]:
    """Pretend no GPU exists: ``torch.cuda.is_available()`` is False and initialising CUDA fails."""
    with (
        mock.patch.object(torch.cuda, "is_available", return_value=False),
        mock.patch.object(torch.cuda, "device_count", return_value=0),
        mock.patch.object(torch.cuda, "_lazy_init", _refuse_cuda),
    ):
        yield


@check(*COMPONENT_KINDS, requires=DEFAULTS_VALID)
def check_builds_without_gpu(subject: Subject) -> None:
    """from_args builds the component on a machine without a GPU, keeping tensors on the CPU"""
    with no_gpu():
        instance = subject.build(**runtime_objects(subject))
    if not isinstance(instance, subject.obj):
        raise ConformanceError(
            f"from_args returned {type(instance).__name__}, not a {subject.obj.__qualname__}",
            "keep Component.from_args (it returns cls(**validated_args, **runtime))",
        )
    for attr, value in vars(instance).items():
        tensors = list(value.parameters()) if isinstance(value, torch.nn.Module) else [value]
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device.type != "cpu":
                raise ConformanceError(
                    f"attribute {attr!r} holds a tensor on {t.device}",
                    "build on the CPU; compute on the device of each call's inputs",
                )


def _is_registered(subject: Subject) -> bool:
    return subject.distribution != "<unregistered>"


@check(*(spec.kind for spec in kinds()), applies=_is_registered)
def check_name_is_unique(subject: Subject) -> None:
    """no other installed distribution registers the same name for this kind"""
    from trinity_core import registry

    for conflict in registry.conflicts(subject.kind):
        if conflict.name == subject.name:
            raise ConformanceError(
                conflict.describe(),
                f"rename the entry point in {subject.distribution}'s pyproject.toml (e.g. prefix it with the "
                f"distribution's name); a shared name makes every `trinity train` that uses "
                f"{subject.name!r} fail for users who have both installed",
            )
