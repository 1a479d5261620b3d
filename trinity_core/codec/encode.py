"""Encoding: :func:`serialize_many` turns experiences into one payload."""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from typing import Any

from trinity_core.codec.blob import BlobEntry, Ragged, write_blob
from trinity_core.codec.columns import custom_fields_column, json_column, scalar_column
from trinity_core.codec.header import frame
from trinity_core.codec.jsontext import json_depth
from trinity_core.codec.spec import (
    JSON_COLUMNS,
    MAX_JSON_DEPTH,
    SCALAR_COLUMNS,
    ExperienceEncodeError,
    encode_error,
)
from trinity_core.codec.tensors import multi_modal_spec, tensor_field_spec
from trinity_core.experience import EID, TENSOR_FIELDS, Experience, experience_field_names

__all__ = ["serialize_many"]

_EID_NAMES = ("batch", "task", "run", "step", "suffix")
_FIELDS = operator.attrgetter(*experience_field_names())
_EID_FIELDS = operator.attrgetter(*_EID_NAMES)


def _field_columns(experiences: list[Experience]) -> dict[str, Sequence[Any]]:
    """Every field of every experience, one tuple of values per field name (and ``eid.<name>``).

    Each experience is read once, all its fields at a time, and the rows are then transposed.
    """
    names = experience_field_names()
    if not experiences:
        return {name: () for name in (*names, *(f"eid.{name}" for name in _EID_NAMES))}
    fields: dict[str, Sequence[Any]] = dict(
        zip(names, zip(*map(_FIELDS, experiences), strict=True), strict=True)
    )
    eids = fields["eid"]
    if set(map(type, eids)) != {EID}:  # subclasses and wrong types: check one by one
        for index, eid in enumerate(eids):
            if not isinstance(eid, EID):
                raise encode_error(index, "eid", f"must be an EID, got {type(eid).__name__}")
    eid_columns = zip(*map(_EID_FIELDS, eids), strict=True)
    fields.update(zip((f"eid.{name}" for name in _EID_NAMES), eid_columns, strict=True))
    return fields


def serialize_many(experiences: Sequence[Experience]) -> bytes:
    """Encode experiences into one compact, pickle-free payload (see :mod:`trinity_core.codec`).

    Every field round-trips exactly through :func:`~trinity_core.codec.deserialize_many`
    (``experience_type`` included); tensors come back on the CPU, detached and contiguous. Raises
    :class:`ExperienceEncodeError` naming the item and field when a value cannot be written (e.g. an
    object in ``info``, a list where a tensor belongs, a tensor dtype outside the allow-list).
    """
    experiences = list(experiences)
    if set(map(type, experiences)) - {Experience}:  # subclasses and wrong types: check one by one
        for index, exp in enumerate(experiences):
            if not isinstance(exp, Experience):
                raise ExperienceEncodeError(
                    f"experiences[{index}]: expected an Experience, got {type(exp).__name__}"
                )
    fields = _field_columns(experiences)
    columns: dict[str, Any] = {}
    column_blob: list[BlobEntry] = []
    for name in SCALAR_COLUMNS:
        column = scalar_column(name, fields[name], column_blob)
        if column is not None:
            columns[name] = column
    for name in JSON_COLUMNS:
        column = json_column(name, fields[name])
        if column is not None:
            columns[name] = column
    custom = custom_fields_column(fields["custom_fields"])
    if custom is not None:
        columns["custom_fields"] = custom
    try:
        return _write(fields, columns, column_blob, measure=False)
    except Ragged:  # a field's tensors were taken to share one shape and do not
        return _write(fields, columns, column_blob, measure=True)


def _write(
    fields: dict[str, Sequence[Any]], columns: dict[str, Any], column_blob: list[BlobEntry], *, measure: bool
) -> bytes:
    blob = list(column_blob)
    tensors: dict[str, Any] = {}
    for field in TENSOR_FIELDS:
        spec = tensor_field_spec(field, fields[field], blob, measure=measure)
        if spec is not None:
            tensors[field] = spec
    count = len(fields["eid"])
    header: dict[str, Any] = {"n": count, "columns": columns, "tensors": tensors}
    multi_modal = multi_modal_spec(fields["multi_modal_inputs"], blob)
    if multi_modal is not None:
        header["mm"] = multi_modal
    blob_bytes = write_blob(blob)
    try:
        payload = frame(header, blob_bytes)
    except (ValueError, RecursionError):  # nested deeper than the reader accepts
        raise _too_deep(columns) from None
    shared = columns.get("custom_fields", {}).get("c")
    if shared is not None and count * len(shared) > len(payload):
        # The decoder refuses a shared list that expands to more entries than the payload has bytes;
        # write it out per item instead (the header then pays for every entry).
        columns["custom_fields"] = {"v": [shared] * count}
        payload = frame(header, blob_bytes)
    return payload


#: Levels of the header above a free-form value: the header, ``columns``, the column, its list.
_VALUE_LEVELS = 4


def _too_deep(columns: dict[str, Any]) -> ExperienceEncodeError:
    """The error that names the first free-form value nested deeper than a reader accepts."""
    limit = MAX_JSON_DEPTH - _VALUE_LEVELS
    for name in JSON_COLUMNS:
        column = columns.get(name)  # {"j": values} or {"v": values}
        for index, value in enumerate(next(iter(column.values())) if column else ()):
            try:
                depth: int | None = json_depth(json.dumps(value).encode())
            except RecursionError:
                depth = None
            if depth is None or depth > limit:
                deep = "too many levels" if depth is None else f"{depth} levels"
                return encode_error(
                    index,
                    name,
                    f"nests arrays and objects {deep} deep as written (tagged values included); the wire "
                    f"format allows {limit} (MAX_JSON_DEPTH = {MAX_JSON_DEPTH} for the whole header)",
                )
    return ExperienceEncodeError(f"the JSON header nests deeper than MAX_JSON_DEPTH = {MAX_JSON_DEPTH}")
