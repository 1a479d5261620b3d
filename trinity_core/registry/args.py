"""Turn pydantic validation errors into ``(dotted path, message)`` pairs people can act on."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import PydanticUndefined

__all__ = ["default_problems", "dotted", "validation_problems"]


def dotted(loc: Sequence[int | str], prefix: str = "") -> str:
    """``("a", 0, "b")`` -> ``"a[0].b"``, after ``prefix`` when given."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def _model_at(root: type[BaseModel] | None, loc: Sequence[int | str]) -> type[BaseModel] | None:
    model = root
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return model


def _describe(error: Any, root: type[BaseModel] | None) -> str:
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "extra_forbidden":
        owner = _model_at(root, loc[:-1])
        if owner is None:
            return "unknown key"
        allowed = sorted(owner.model_fields)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key; {hint}allowed keys: {', '.join(allowed) or '(none)'}"
    message = str(error.get("msg", "invalid value"))
    if "input" in error and error.get("type") != "missing":
        message += f" (got {error['input']!r})"
    return message


def validation_problems(
    exc: ValidationError, *, prefix: str = "", model: type[BaseModel] | None = None
) -> list[tuple[str, str]]:
    """One ``(dotted path, message)`` per error of ``exc``; ``model`` enables "did you mean" hints."""
    return [(dotted(tuple(e["loc"]), prefix), _describe(e, model)) for e in exc.errors()]


@functools.cache
def default_problems(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """``(field, message)`` for every default of ``model`` that breaks the field's own constraints.

    Pydantic does not validate defaults (``Field(-1.0, gt=0)`` builds), so a broken default would
    surface only when the component runs. Each default is validated alone against its field's type and
    constraints; model validators do not run (they may depend on which keys were given).
    """
    out: list[tuple[str, str]] = []
    for name, info in model.model_fields.items():
        if info.default is PydanticUndefined and info.default_factory is None:
            continue
        try:
            value = info.get_default(call_default_factory=True, validated_data={})
            kind: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
            adapter: TypeAdapter[Any] = TypeAdapter(kind)
        except Exception:  # an annotation pydantic cannot adapt alone: nothing to check
            continue
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            for sub, msg in validation_problems(exc, prefix=name):
                out.append((sub, f"the default {value!r} breaks its own constraint: {msg}"))
    return tuple(out)
