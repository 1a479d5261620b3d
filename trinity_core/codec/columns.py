"""Columns: the non-tensor fields of all experiences, one header entry per field.

A column is ``{"c": value}`` (one value for all), ``{"v": [...]}`` (one value each; tagged JSON for
free-form fields), ``{"j": [...]}`` (free-form, plain JSON with no tags), a blob form (``{"i64": key}``,
``{"f64": key}``: the values are one tensor of the blob) or absent (every value is the default).
"""

from __future__ import annotations

import array
import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.codec.blob import BlobEntry, blob_tensor
from trinity_core.codec.spec import (
    BLOB_COLUMNS,
    BLOB_FORMS,
    COUNTED_COLUMN,
    DTYPE_NAMES,
    EXPERIENCE_TYPES,
    JSON_COLUMNS,
    NONE,
    REQUIRED,
    SCALAR_COLUMNS,
    TENSOR_DTYPES,
    ExperienceEncodeError,
    Malformed,
    blob_key,
    encode_error,
    require,
)
from trinity_core.experience import CustomField
from trinity_core.jsonvalue import from_json_value, to_json_value

__all__ = [
    "Same",
    "custom_fields_column",
    "decode_blob_column",
    "decode_custom_fields",
    "decode_json_column",
    "decode_scalar",
    "is_blob_form",
    "json_column",
    "scalar_column",
]


class Same:
    """A decoded column whose every item has the same immutable value (kept once, not per item)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


#: A decoded column: one value per item, or one shared immutable value.
Column = list[Any] | Same


# ------------------------------------------------------------------------------------------- encoding


def _coerce_scalar(value: Any, allowed: frozenset[type], index: int, name: str) -> Any:
    """Slow path for a scalar of an unexpected type: accept numpy numbers, reject the rest clearly."""
    if type(value) in allowed:
        return value
    if float in allowed and isinstance(value, float):  # numpy.float64 and other float subclasses
        return float(value)
    if int in allowed and not isinstance(value, bool) and hasattr(value, "__index__"):
        return operator.index(value)
    names = " or ".join(sorted("None" if t is NONE else t.__name__ for t in allowed))
    raise encode_error(index, name, f"must be {names}, got {type(value).__name__} {value!r:.80}")


def scalar_column(name: str, values: Sequence[Any], blob: list[BlobEntry]) -> dict[str, Any] | None:
    """The header column of scalar field ``name``, or ``None`` when every value is the default.

    Varying numbers of the columns in :data:`BLOB_COLUMNS` are appended to ``blob`` instead.
    """
    allowed, default = SCALAR_COLUMNS[name]
    kinds = set(map(type, values))
    if not kinds <= allowed:
        values = [_coerce_scalar(v, allowed, i, name) for i, v in enumerate(values)]
        kinds = set(map(type, values))
    if name == "experience_type" and not set(values) <= set(EXPERIENCE_TYPES):
        for index, value in enumerate(values):
            if value not in EXPERIENCE_TYPES:
                raise encode_error(index, name, f"must be one of {EXPERIENCE_TYPES}, got {value!r}")
    if not values or name == COUNTED_COLUMN:
        return {"v": list(values)}
    first = values[0]
    # One value for all, unless a float equality would merge 0.0 with -0.0 (or NaN never equals itself).
    exact = type(first) is not float or (first == first and first != 0.0)
    if len(kinds) == 1 and exact and list(values).count(first) == len(values):
        if default is not REQUIRED and first is default:
            return None
        return {"c": first}
    form = BLOB_COLUMNS.get(name)
    if form is not None and kinds == {BLOB_FORMS[form][0]}:
        _, typecode, dtype = BLOB_FORMS[form]
        try:
            packed = array.array(typecode, values)
        except OverflowError:  # ints outside int64 stay in the JSON header, which holds any int
            return {"v": list(values)}
        key = blob_key(name)
        blob.append(BlobEntry(key, dtype, [len(values)], [torch.frombuffer(packed, dtype=dtype)]))
        return {form: key}
    return {"v": list(values)}


def json_column(name: str, values: Sequence[Any]) -> dict[str, Any] | None:
    """The header column of free-form field ``name``, or ``None`` when every value is the default."""
    if JSON_COLUMNS[name] is dict:
        if set(map(type, values)) != {dict}:
            for index, value in enumerate(values):
                if not isinstance(value, dict):
                    raise encode_error(index, name, f"must be a dict, got {type(value).__name__}")
            values = [dict(v) for v in values]
        if not any(values):
            return None
    elif set(map(type, values)) == {NONE}:
        return None
    try:
        encoded = [to_json_value(value) for value in values]
    except TypeError:
        for index, value in enumerate(values):
            try:
                to_json_value(value, f"experiences[{index}].{name}")
            except TypeError as exc:
                raise ExperienceEncodeError(str(exc)) from None
        raise
    # "j": plain JSON, nothing tagged (decoding skips the tag scan); "v": tagged JSON values.
    if all(map(operator.is_, encoded, values)):
        return {"j": list(values)}
    return {"v": encoded}


def custom_fields_column(lists: Sequence[Any]) -> dict[str, Any] | None:
    """The header column of ``custom_fields``: ``c`` when all items share one list, else ``v``.

    The caller turns a ``c`` column into ``v`` when the shared list, repeated for every item, would
    hold more entries than the payload has bytes (see :func:`decode_custom_fields`).
    """
    if not any(lists):
        return None
    encoded: list[list[list[str]]] = []
    for index, fields in enumerate(lists):
        item = []
        for position, custom in enumerate(fields):
            where = f"custom_fields[{position}]"
            if not isinstance(custom, CustomField):
                raise encode_error(index, where, f"must be a CustomField, got {type(custom).__name__}")
            dtype_name = DTYPE_NAMES.get(custom.data_type)
            if dtype_name is None:
                raise encode_error(
                    index, where, f"data_type {custom.data_type!r} is not one of {', '.join(TENSOR_DTYPES)}"
                )
            if type(custom.source_field) is not str or type(custom.destination_field) is not str:
                raise encode_error(index, where, "source_field and destination_field must be str")
            item.append([custom.source_field, custom.destination_field, dtype_name])
        encoded.append(item)
    if encoded.count(encoded[0]) == len(encoded):
        return {"c": encoded[0]}
    return {"v": encoded}


# ------------------------------------------------------------------------------------------- decoding


def _column_spec(name: str, spec: Any, count: int, forms: tuple[str, ...]) -> tuple[str, Any]:
    """Return ``(form, payload)`` of a column, checking that it is ``{form: payload}`` of a known form."""
    require(type(spec) is dict and len(spec) == 1, f"column {name!r} must be an object with one key {forms}")
    ((form, payload),) = spec.items()
    require(form in forms, f"column {name!r}: unknown form {form!r} (expected one of {forms})")
    if form != "c":
        require(type(payload) is list, f"column {name!r}: {form!r} must be a list")
        require(len(payload) == count, f"column {name!r} has {len(payload)} values for {count} experiences")
    return form, payload


def is_blob_form(name: str, spec: Any) -> bool:
    """Whether ``spec`` is the blob form of column ``name`` (``{form: key}``, see :data:`BLOB_COLUMNS`)."""
    form = BLOB_COLUMNS.get(name)
    return form is not None and type(spec) is dict and spec.keys() == {form}


def decode_blob_column(
    name: str, spec: dict[str, Any], count: int, blob: dict[str, Tensor], used: set[str]
) -> list[Any]:
    """The values of column ``name`` from its tensor in the blob (int64 or float64, shape ``(count,)``)."""
    form, key = BLOB_COLUMNS[name], blob_key(name)
    require(spec == {form: key}, f"column {name!r}: the {form} form must name {key!r}")
    _, _, dtype = BLOB_FORMS[form]
    values = blob_tensor(blob, key, used)
    require(
        values.dtype == dtype and tuple(values.shape) == (count,),
        f"column {name!r}: blob tensor must be {DTYPE_NAMES[dtype]} of shape ({count},)",
    )
    column: list[Any] = values.tolist()
    return column


def decode_scalar(name: str, spec: Any, count: int) -> Column:
    """The values of scalar column ``name`` (not in its blob form), type-checked."""
    allowed, default = SCALAR_COLUMNS[name]
    if spec is None:
        require(default is not REQUIRED or count == 0, f"required column {name!r} is missing")
        return Same(default)
    form, payload = _column_spec(name, spec, count, ("v",) if name == COUNTED_COLUMN else ("c", "v"))
    values = [payload] if form == "c" else payload
    kinds = set(map(type, values))
    require(
        kinds <= allowed,
        f"column {name!r} holds values of a wrong type ({sorted(k.__name__ for k in kinds)})",
    )
    if name == "experience_type":
        require(set(values) <= set(EXPERIENCE_TYPES), f"column {name!r}: unknown experience type")
    return Same(payload) if form == "c" else payload


def decode_json_column(name: str, spec: Any, count: int) -> Column:
    """The values of free-form column ``name``; ``Same(None)`` stands for the default."""
    if spec is None:
        return Same(None)  # the default: the builder gives each item a fresh {} for info and metrics
    form, values = _column_spec(name, spec, count, ("j", "v"))
    if form == "v":
        try:
            values = [from_json_value(value) for value in values]
        except ValueError as exc:
            raise Malformed(f"column {name!r}: {exc}") from exc
    if JSON_COLUMNS[name] is dict:
        require(set(map(type, values)) <= {dict}, f"column {name!r} must hold dicts")
    return values  # type: ignore[no-any-return]


def _parse_custom(item: Any) -> list[CustomField]:
    require(type(item) is list, "column 'custom_fields': each item must be a list")
    fields = []
    for entry in item:
        require(
            type(entry) is list and len(entry) == 3 and all(type(part) is str for part in entry),
            "column 'custom_fields': entries must be [source_field, destination_field, dtype]",
        )
        dtype = TENSOR_DTYPES.get(entry[2])
        require(dtype is not None, f"column 'custom_fields': dtype {entry[2]!r} is not allowed")
        fields.append(CustomField(entry[0], entry[1], dtype))  # type: ignore[arg-type]
    return fields


def decode_custom_fields(spec: Any, count: int, payload_size: int) -> Column:
    """The ``custom_fields`` of every item; ``Same(None)`` stands for the default (a fresh ``[]`` each).

    Items of a ``c`` column share the decoded (frozen) :class:`CustomField` objects, each in a list of
    its own. Those lists together may hold at most ``payload_size`` entries, one per payload byte: a
    short header can never make the decoder build ``n x k`` entries from ``n + k`` bytes.
    """
    if spec is None:
        return Same(None)
    form, payload = _column_spec("custom_fields", spec, count, ("c", "v"))
    if form == "v":
        return [_parse_custom(item) for item in payload]
    shared = _parse_custom(payload)
    require(
        count * len(shared) <= payload_size,
        f"column 'custom_fields': {count} copies of {len(shared)} shared entries exceed the payload's "
        f"{payload_size} bytes",
    )
    return [list(shared) for _ in range(count)]
