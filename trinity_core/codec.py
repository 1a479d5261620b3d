"""The pickle-free wire format of experiences: ``serialize_many`` / ``deserialize_many``.

A payload is::

    b"TRXC" | u8 version (1) | u64 LE header length | u64 LE blob length | JSON header | safetensors blob

The JSON header is *columnar*: one entry per field over all experiences, not one record per experience.
Each tensor field (``tokens``, ``logprobs``, ...) of all experiences that have it is concatenated into a
single flat tensor of the blob; the header records which experiences have it (``present``, ``null`` for
all), its dtype and the per-item lengths (one ``len`` when all are equal) or shapes. Scalar fields are
columns stored as one value for all (``{"c": v}``), a list (``{"v": [...]}``) or, for free-form
columns with nothing tagged, a plain JSON list (``{"j": [...]}``); a column whose every value is the
default (``info == {}``, ``reward is None``, ...) is left out. Varying integer ids and prompt lengths
and varying float rewards travel as one int64 / float64 tensor of the blob instead (``{"i64": key}``,
``{"f64": key}``). Free-form values (``info``,
``metrics``, messages, tools) use the tagged JSON of :mod:`trinity_core.jsonvalue`. See
``docs/wire-format.md`` for the full specification.

Decoding never unpickles, evaluates or looks anything up by a name taken from the payload except in fixed
allow-lists. Every length, offset, index and dtype is checked, and any malformed, truncated, oversized or
adversarial input raises :class:`ExperienceDecodeError` (and nothing else). Payloads of the reference
implementation (pickled metadata, magic ``b"TRXP"``, or a bare pickle) are read only with the explicit,
unsafe ``allow_pickle=True``.
"""

from __future__ import annotations

import array
import ctypes
import gc
import json
import operator
import pickle
import platform
import struct
import warnings
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

import torch
from safetensors.torch import load as _st_load
from torch import Tensor

from trinity_core._bulk import ROW_NAMES, build_experiences, experience_rows
from trinity_core.experience import (
    EID,
    TENSOR_FIELDS,
    CustomField,
    Experience,
    experience_field_names,
)
from trinity_core.jsonvalue import TORCH_DTYPES, from_json_value, to_json_value

__all__ = [
    "LEGACY_MAGIC",
    "MAGIC",
    "MAX_HEADER_BYTES",
    "MAX_ITEMS",
    "TENSOR_DTYPES",
    "VERSION",
    "ExperienceDecodeError",
    "ExperienceEncodeError",
    "deserialize_many",
    "serialize_many",
]

#: First four bytes of every payload.
MAGIC = b"TRXC"
#: Format version written by this module (the only one it reads).
VERSION = 1
#: Magic of the reference implementation's payloads (pickled metadata); read only with ``allow_pickle``.
LEGACY_MAGIC = b"TRXP"
#: Largest JSON header accepted, in bytes.
MAX_HEADER_BYTES = 1 << 30
#: Largest number of experiences in one payload.
MAX_ITEMS = 1 << 24

_PREFIX = struct.Struct("<4sBQQ")
#: Tensor dtypes accepted in tensor fields and multi-modal inputs (those safetensors can store).
TENSOR_DTYPES: dict[str, torch.dtype] = {
    name: dtype for name, dtype in TORCH_DTYPES.items() if dtype is not torch.complex128
}
_DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in TENSOR_DTYPES.items()}
#: safetensors' names of the dtypes in :data:`TENSOR_DTYPES`.
_SAFETENSORS_CODES: dict[torch.dtype, str] = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.uint16: "U16",
    torch.uint32: "U32",
    torch.uint64: "U64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.complex64: "C64",
}
if platform.python_implementation() == "CPython":
    _PY_BYTES_NEW: Any = ctypes.pythonapi.PyBytes_FromStringAndSize
    _PY_BYTES_NEW.restype = ctypes.py_object
    _PY_BYTES_NEW.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)
else:  # pragma: no cover - other interpreters
    _PY_BYTES_NEW = None
_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")
_FIRST = operator.itemgetter(0)
_EXPERIENCE_TYPES = ("single_turn", "multi_turn", "dpo")
_NONE = type(None)


class ExperienceDecodeError(ValueError):
    """A payload is not a valid experience payload (malformed, truncated, oversized or not allowed)."""


class ExperienceEncodeError(TypeError):
    """An experience holds a value the wire format cannot write; the message names the item and field."""


# ------------------------------------------------------------------------------------------- columns
# Scalar columns: name on the wire -> (allowed types, default or _REQUIRED).
_REQUIRED = object()
_SCALAR_COLUMNS: dict[str, tuple[frozenset[type], Any]] = {
    "eid.batch": (frozenset({int, str}), _REQUIRED),
    "eid.task": (frozenset({int, str}), _REQUIRED),
    "eid.run": (frozenset({int, str}), _REQUIRED),
    "eid.step": (frozenset({int, str}), _REQUIRED),
    "eid.suffix": (frozenset({str}), _REQUIRED),
    "prompt_length": (frozenset({int}), _REQUIRED),
    "experience_type": (frozenset({str}), _REQUIRED),
    "reward": (frozenset({float, int, _NONE}), None),
    "truncate_status": (frozenset({str, _NONE}), None),
    "response_text": (frozenset({str, _NONE}), None),
    "prompt_text": (frozenset({str, _NONE}), None),
}
# Free-form columns (tagged JSON, one fresh value per item): name -> default factory (dict) or None.
_JSON_COLUMNS: dict[str, type[dict[str, Any]] | None] = {
    "info": dict,
    "metrics": dict,
    "messages": None,
    "tools": None,
    "chosen_messages": None,
    "rejected_messages": None,
}
#: Blob forms of scalar columns: form -> (the one Python type of the values, ``array`` typecode, dtype).
_BLOB_FORMS: dict[str, tuple[type, str, torch.dtype]] = {
    "f64": (float, "d", torch.float64),
    "i64": (int, "q", torch.int64),
}
#: Columns that travel as one tensor of the blob (``{form: "column.<name>"}``) when their values vary and
#: all have the form's type: bit-exact floats (NaN payloads and -0.0 kept), and far cheaper than writing
#: and parsing thousands of number literals in the JSON header.
_BLOB_COLUMNS: dict[str, str] = {
    "eid.batch": "i64",
    "eid.task": "i64",
    "eid.run": "i64",
    "eid.step": "i64",
    "prompt_length": "i64",
    "reward": "f64",
}
#: Always written as a full list, so that the header's size bounds the number of experiences it can
#: claim (a few bytes of header can never make the decoder build millions of objects).
_COUNTED_COLUMN = "eid.suffix"
_ALL_COLUMNS = frozenset({*_SCALAR_COLUMNS, *_JSON_COLUMNS, "custom_fields"})
_HEADER_KEYS = frozenset({"n", "columns", "tensors", "mm"})
#: The columns a decoded payload is made of (every row name but the EID object itself).
_DECODED_NAMES = frozenset(ROW_NAMES) - {"eid"}


def _blob_key(column: str) -> str:
    return f"column.{column}"


# ------------------------------------------------------------------------------------------- encoding
#: The values of one column: a tuple from the transposed rows, or a list built from it.
_Values = tuple[Any, ...] | list[Any]


def _encode_error(index: int, field: str, message: str) -> ExperienceEncodeError:
    return ExperienceEncodeError(f"experiences[{index}].{field}: {message}")


def _field_columns(experiences: list[Experience]) -> dict[str, _Values]:
    """Every field of every experience, one tuple of values per name of :data:`ROW_NAMES`.

    Each experience is visited once, reading all its attributes (the EID's included, see
    :func:`experience_rows`), and the rows are then transposed. Fetching field by field instead walks
    every object's memory once per field, which costs more than everything else on the Python side of
    encoding once the heap is fragmented.
    """
    if not experiences:
        return {name: () for name in ROW_NAMES}
    try:
        rows = experience_rows(experiences)
    except AttributeError:
        _check_eids(tuple(exp.eid for exp in experiences))  # name the item when its eid is to blame
        raise
    fields: dict[str, _Values] = dict(zip(ROW_NAMES, zip(*rows, strict=True), strict=True))
    _check_eids(fields["eid"])
    return fields


def _check_eids(eids: _Values) -> None:
    if set(map(type, eids)) != {EID}:  # subclasses and wrong types: check one by one
        for index, eid in enumerate(eids):
            if not isinstance(eid, EID):
                raise _encode_error(index, "eid", f"must be an EID, got {type(eid).__name__}")


def _coerce_scalar(value: Any, allowed: frozenset[type], index: int, name: str) -> Any:
    """Slow path for a scalar of an unexpected type: accept numpy numbers, reject the rest clearly."""
    if type(value) in allowed:
        return value
    if float in allowed and isinstance(value, float):  # numpy.float64 and other float subclasses
        return float(value)
    if int in allowed and not isinstance(value, bool) and hasattr(value, "__index__"):
        return operator.index(value)
    names = " or ".join(sorted("None" if t is _NONE else t.__name__ for t in allowed))
    raise _encode_error(index, name, f"must be {names}, got {type(value).__name__} {value!r:.80}")


def _scalar_column(
    name: str, values: _Values, allowed: frozenset[type], default: Any, blob: list[_BlobEntry]
) -> dict[str, Any] | None:
    """The header column of scalar field ``name``, or ``None`` when every value is the default.

    Varying numbers of the columns in :data:`_BLOB_COLUMNS` are appended to ``blob`` instead.
    """
    kinds = set(map(type, values))
    if not kinds <= allowed:
        values = [_coerce_scalar(v, allowed, i, name) for i, v in enumerate(values)]
        kinds = set(map(type, values))
    if name == "experience_type" and not set(values) <= set(_EXPERIENCE_TYPES):
        for index, value in enumerate(values):
            if value not in _EXPERIENCE_TYPES:
                raise _encode_error(index, name, f"must be one of {_EXPERIENCE_TYPES}, got {value!r}")
    if not values or name == _COUNTED_COLUMN:
        return {"v": values}
    first = values[0]
    # One value for all, unless a float equality would merge 0.0 with -0.0 (or NaN never equals itself).
    exact = type(first) is not float or (first == first and first != 0.0)
    if len(kinds) == 1 and exact and values.count(first) == len(values):
        if default is not _REQUIRED and first is default:
            return None
        return {"c": first}
    form = _BLOB_COLUMNS.get(name)
    if form is not None and kinds == {_BLOB_FORMS[form][0]}:
        _, typecode, dtype = _BLOB_FORMS[form]
        try:
            packed = array.array(typecode, values)
        except OverflowError:  # ints outside int64 stay in the JSON header, which holds any int
            return {"v": values}
        key = _blob_key(name)
        blob.append(_BlobEntry(key, dtype, [len(values)], [torch.frombuffer(packed, dtype=dtype)]))
        return {form: key}
    return {"v": values}


def _json_column(name: str, values: _Values, default: type[dict[str, Any]] | None) -> dict[str, Any] | None:
    if default is dict:
        if set(map(type, values)) != {dict}:
            for index, value in enumerate(values):
                if not isinstance(value, dict):
                    raise _encode_error(index, name, f"must be a dict, got {type(value).__name__}")
            values = [dict(v) for v in values]
        if not any(values):
            return None
    elif set(map(type, values)) == {_NONE}:
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
        return {"j": values}
    return {"v": encoded}


def _custom_fields_column(lists: _Values) -> dict[str, Any] | None:
    if not any(lists):
        return None
    encoded: list[list[list[str]]] = []
    for index, fields in enumerate(lists):
        item = []
        for position, custom in enumerate(fields):
            where = f"custom_fields[{position}]"
            if not isinstance(custom, CustomField):
                raise _encode_error(index, where, f"must be a CustomField, got {type(custom).__name__}")
            dtype_name = _DTYPE_NAMES.get(custom.data_type)
            if dtype_name is None:
                raise _encode_error(
                    index, where, f"data_type {custom.data_type!r} is not one of {', '.join(TENSOR_DTYPES)}"
                )
            if type(custom.source_field) is not str or type(custom.destination_field) is not str:
                raise _encode_error(index, where, "source_field and destination_field must be str")
            item.append([custom.source_field, custom.destination_field, dtype_name])
        encoded.append(item)
    if encoded.count(encoded[0]) == len(encoded):
        return {"c": encoded[0]}
    return {"v": encoded}


def _check_tensors(field: str, tensors: _Values, present: Sequence[int]) -> None:
    for index, value in zip(present, tensors, strict=True):
        if not isinstance(value, Tensor):
            raise _encode_error(index, field, f"must be a torch.Tensor or None, got {type(value).__name__}")
        if value.dtype not in _DTYPE_NAMES:
            raise _encode_error(index, field, f"dtype {value.dtype} is not one of {', '.join(TENSOR_DTYPES)}")
        if value.layout != torch.strided:
            raise _encode_error(index, field, f"must be a dense tensor, got layout {value.layout}")


def _new_bytes(size: int) -> tuple[bytes | bytearray, memoryview]:
    """A new, not yet shared payload object of ``size`` bytes and a writable view of its memory.

    On CPython the payload is a ``bytes`` object allocated uninitialised with the C API
    (``PyBytes_FromStringAndSize(NULL, size)``, which exists so that the creator fills it before anyone
    else sees it); tensors are copied straight into it. That saves allocating, zero-filling and copying
    a second buffer of the payload's size (a third of the encode time for large batches). Elsewhere a
    ``bytearray`` is filled and copied.
    """
    if _PY_BYTES_NEW is None or size == 0:
        buffer = bytearray(size)
        return buffer, memoryview(buffer)
    payload = _PY_BYTES_NEW(None, size)
    address = ctypes.cast(ctypes.c_char_p(payload), ctypes.c_void_p).value
    assert address is not None
    # A plain byte view: slice assignment into the ctypes array itself goes byte by byte.
    return payload, memoryview((ctypes.c_ubyte * size).from_address(address)).cast("B")


class _BlobEntry:
    """One tensor of the safetensors blob: its name, dtype, shape and the pieces concatenated into it.

    ``rows`` is set when the pieces are taken to be ``rows`` 1-D tensors of one length without having
    been measured; the copy then checks it (see :func:`_fill`).
    """

    __slots__ = ("dtype", "name", "pieces", "rows", "shape")

    def __init__(
        self, name: str, dtype: torch.dtype, shape: list[int], pieces: _Values, rows: int | None = None
    ) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.pieces = pieces
        self.rows = rows

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * self.dtype.itemsize


class _Ragged(Exception):
    """Internal: the pieces of an entry with ``rows`` turned out not to share one 1-D shape."""


def _tensor_field(
    field: str, values: _Values, blob: list[_BlobEntry], *, measure: bool
) -> dict[str, Any] | None:
    """The header spec of tensor field ``field``; its blob entries are appended to ``blob``.

    Every value must be ``None`` or a tensor with an allowed dtype. Unless ``measure`` is set, a field
    whose first and last tensors are 1-D of the same non-zero length is assumed to have that length
    throughout: reading every shape costs a pass over all tensors, while :func:`_fill` verifies the
    assumption for free, and :func:`serialize_many` starts over with ``measure=True`` if it is wrong.
    """
    kinds = set(map(type, values))  # not values.count(None): that runs Tensor.__eq__ per item
    if kinds == {_NONE} or not values:
        return None
    spec: dict[str, Any]
    if _NONE in kinds:
        present: Sequence[int] = [i for i, v in enumerate(values) if v is not None]
        tensors: _Values = [values[i] for i in present]
        spec = {"present": present}
    else:
        present = range(len(values))
        tensors = values
        spec = {"present": None}
    kinds.discard(_NONE)
    dtypes = set(map(_DTYPE, tensors)) if kinds == {Tensor} else set()
    if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPE_NAMES:
        _check_tensors(field, tensors, present)
        dtypes = set(map(_DTYPE, tensors))
    if len(dtypes) != 1:
        # Mixed dtypes cannot share one flat tensor: store each item's tensor on its own.
        for index, tensor in zip(present, tensors, strict=True):
            blob.append(_BlobEntry(f"{field}.{index}", tensor.dtype, list(tensor.shape), [tensor]))
        spec["per_item"] = True
        return spec
    (dtype,) = dtypes
    spec["dtype"] = _DTYPE_NAMES[dtype]
    first = tensors[0].shape
    if not measure and len(tensors) > 1 and len(first) == 1 and first[0] and tensors[-1].shape == first:
        spec["len"] = first[0]
        blob.append(_BlobEntry(field, dtype, [first[0] * len(tensors)], tensors, rows=len(tensors)))
        return spec
    shapes = list(map(_SHAPE, tensors))
    if len(shapes[0]) == 1 and shapes.count(shapes[0]) == len(shapes):  # the common case: one length
        spec["len"] = shapes[0][0]
        total = shapes[0][0] * len(shapes)
    elif set(map(len, shapes)) == {1}:
        lens = list(map(_FIRST, shapes))
        spec["lens"] = lens
        total = sum(lens)
    else:
        spec["shapes"] = list(map(list, shapes))
        total = sum(t.numel() for t in tensors)
    blob.append(_BlobEntry(field, dtype, [total], tensors))
    return spec


def _multi_modal(values: _Values, blob: list[_BlobEntry]) -> dict[str, Any] | None:
    if set(map(type, values)) == {_NONE}:
        return None
    present: list[int] = []
    keys: list[list[str]] = []
    for index, inputs in enumerate(values):
        if inputs is None:
            continue
        if not isinstance(inputs, dict):
            raise _encode_error(
                index, "multi_modal_inputs", f"must be a dict or None, got {type(inputs).__name__}"
            )
        names = list(inputs)
        for position, name in enumerate(names):
            if type(name) is not str:
                raise _encode_error(index, "multi_modal_inputs", f"keys must be str, got {name!r}")
            tensor = inputs[name]
            _check_tensors(f"multi_modal_inputs[{name!r}]", [tensor], [index])
            blob.append(_BlobEntry(f"mm.{index}.{position}", tensor.dtype, list(tensor.shape), [tensor]))
        present.append(index)
        keys.append(names)
    return {"present": present, "keys": keys}


def _fill(target: Tensor, entry: _BlobEntry) -> None:
    """Copy the flattened pieces of ``entry`` one after another into the 1-D ``target``.

    Pieces of an entry with ``rows`` are stacked into a ``(rows, length)`` view of the target, which
    raises unless every piece has exactly the shape ``(length,)``: that is the check that lets
    :func:`_tensor_field` skip reading their shapes. A failure raises :class:`_Ragged`.
    """
    pieces = entry.pieces
    with torch.no_grad():
        if entry.rows is not None:
            try:
                torch.stack(pieces, out=target.view(entry.rows, -1))
            except RuntimeError as exc:  # another shape somewhere (or another device): measure them all
                raise _Ragged(entry.name) from exc
            return
        if len(pieces) == 1:
            target.copy_(pieces[0].reshape(-1))
            return
        flat = [piece.reshape(-1) for piece in pieces] if pieces[0].dim() != 1 else pieces
        try:
            torch.cat(flat, out=target)
        except RuntimeError:  # pieces of several ranks or on other devices: copy one by one
            offset = 0
            for piece in flat:
                target[offset : offset + piece.numel()].copy_(piece.reshape(-1))
                offset += piece.numel()


def _write(header: dict[str, Any], entries: list[_BlobEntry]) -> bytes:
    """Lay out prefix, JSON header and safetensors blob in one buffer and copy each tensor there once.

    Tensors are ordered by element size, largest first, and both headers are padded with spaces to a
    multiple of 8 bytes, so every tensor starts at an offset aligned to its element size.
    """
    entries = sorted(entries, key=lambda entry: -entry.dtype.itemsize)
    st_header: dict[str, Any] = {}
    offset = 0
    for entry in entries:
        end = offset + entry.nbytes
        st_header[entry.name] = {
            "dtype": _SAFETENSORS_CODES[entry.dtype],
            "shape": entry.shape,
            "data_offsets": [offset, end],
        }
        offset = end
    st_bytes = json.dumps(st_header, separators=(",", ":")).encode("ascii")
    st_bytes += b" " * (-len(st_bytes) % 8)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("ascii")
    header_bytes += b" " * (-(_PREFIX.size + len(header_bytes)) % 8)
    blob_len = 8 + len(st_bytes) + offset
    payload, buffer = _new_bytes(_PREFIX.size + len(header_bytes) + blob_len)
    _PREFIX.pack_into(buffer, 0, MAGIC, VERSION, len(header_bytes), blob_len)
    position = _PREFIX.size
    buffer[position : position + len(header_bytes)] = header_bytes
    position += len(header_bytes)
    struct.pack_into("<Q", buffer, position, len(st_bytes))
    buffer[position + 8 : position + 8 + len(st_bytes)] = st_bytes
    data_start = position + 8 + len(st_bytes)
    for entry in entries:
        numel = _numel(entry.shape)
        if numel:
            start = data_start + int(st_header[entry.name]["data_offsets"][0])
            _fill(torch.frombuffer(buffer, dtype=entry.dtype, count=numel, offset=start), entry)
    del buffer
    return payload if isinstance(payload, bytes) else bytes(payload)


def serialize_many(experiences: Sequence[Experience]) -> bytes:
    """Encode experiences into one compact, pickle-free payload (see the module docstring for the layout).

    Every field round-trips exactly through :func:`deserialize_many` (``experience_type`` included);
    tensors come back on the CPU, detached and contiguous. Raises :class:`ExperienceEncodeError` naming
    the item and field when a value cannot be written (e.g. an object in ``info``, a list where a tensor
    belongs, a tensor dtype outside :data:`TENSOR_DTYPES`).
    """
    experiences = list(experiences)
    if set(map(type, experiences)) - {Experience}:  # subclasses and wrong types: check one by one
        for index, exp in enumerate(experiences):
            if not isinstance(exp, Experience):
                raise ExperienceEncodeError(
                    f"experiences[{index}]: expected an Experience, got {type(exp).__name__}"
                )
    # Transposing the fields makes one tuple per item; each would count towards the cyclic collector's
    # next pass over the whole heap. Nothing here creates reference cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _encode(experiences)
    finally:
        if collecting:
            gc.enable()


def _encode(experiences: list[Experience]) -> bytes:
    fields = _field_columns(experiences)
    columns: dict[str, Any] = {}
    column_blob: list[_BlobEntry] = []
    for name, (allowed, default) in _SCALAR_COLUMNS.items():
        column = _scalar_column(name, fields[name], allowed, default, column_blob)
        if column is not None:
            columns[name] = column
    for name, factory in _JSON_COLUMNS.items():
        column = _json_column(name, fields[name], factory)
        if column is not None:
            columns[name] = column
    custom = _custom_fields_column(fields["custom_fields"])
    if custom is not None:
        columns["custom_fields"] = custom
    try:
        return _write_with_tensors(fields, columns, column_blob, measure=False)
    except _Ragged:  # a field's tensors were taken to share one shape and do not
        return _write_with_tensors(fields, columns, column_blob, measure=True)


def _write_with_tensors(
    fields: dict[str, _Values], columns: dict[str, Any], column_blob: list[_BlobEntry], *, measure: bool
) -> bytes:
    blob = list(column_blob)
    tensors: dict[str, Any] = {}
    for field in TENSOR_FIELDS:
        spec = _tensor_field(field, fields[field], blob, measure=measure)
        if spec is not None:
            tensors[field] = spec
    header: dict[str, Any] = {"n": len(fields["eid"]), "columns": columns, "tensors": tensors}
    multi_modal = _multi_modal(fields["multi_modal_inputs"], blob)
    if multi_modal is not None:
        header["mm"] = multi_modal
    return _write(header, blob)


# ------------------------------------------------------------------------------------------- decoding


class _Malformed(Exception):
    """Internal: a structural check failed (turned into ExperienceDecodeError with context)."""


class _Same:
    """A column whose every item has the same immutable value (kept once, not expanded per item)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_Column = list[Any] | _Same


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise _Malformed(message)


def _ints(values: Any, what: str) -> list[int]:
    _require(type(values) is list, f"{what} must be a list")
    _require(set(map(type, values)) <= {int}, f"{what} must hold only ints")
    return values  # type: ignore[no-any-return]


def _numel(shape: list[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def _presence(spec: dict[str, Any], count: int, what: str) -> list[int] | None:
    _require("present" in spec, f"{what}: 'present' is missing")
    present = spec["present"]
    if present is None:
        return None
    present = _ints(present, f"{what}.present")
    if present:
        _require(
            present[0] >= 0 and present[-1] < count, f"{what}.present: index out of range 0..{count - 1}"
        )
        _require(all(map(operator.lt, present, present[1:])), f"{what}.present: must be strictly increasing")
    return present


def _column_spec(name: str, spec: Any, count: int, forms: tuple[str, ...]) -> tuple[str, Any]:
    """Return ``(form, payload)`` of a column, checking that it is ``{form: payload}`` of a known form."""
    _require(type(spec) is dict and len(spec) == 1, f"column {name!r} must be an object with one key {forms}")
    ((form, payload),) = spec.items()
    _require(form in forms, f"column {name!r}: unknown form {form!r} (expected one of {forms})")
    if form != "c":
        _require(type(payload) is list, f"column {name!r}: {form!r} must be a list")
        _require(len(payload) == count, f"column {name!r} has {len(payload)} values for {count} experiences")
    return form, payload


def _is_blob_form(name: str, spec: Any) -> bool:
    """Whether ``spec`` is the blob form of column ``name`` (``{form: key}``, see :data:`_BLOB_COLUMNS`)."""
    form = _BLOB_COLUMNS.get(name)
    return form is not None and type(spec) is dict and spec.keys() == {form}


def _decode_blob_column(
    name: str, spec: dict[str, Any], count: int, blob: dict[str, Tensor], used: set[str]
) -> list[Any]:
    form, key = _BLOB_COLUMNS[name], _blob_key(name)
    _require(spec == {form: key}, f"column {name!r}: the {form} form must name {key!r}")
    _, _, dtype = _BLOB_FORMS[form]
    values = _blob_tensor(blob, key, used)
    _require(
        values.dtype == dtype and tuple(values.shape) == (count,),
        f"column {name!r}: blob tensor must be {_DTYPE_NAMES[dtype]} of shape ({count},)",
    )
    column: list[Any] = values.tolist()
    return column


def _decode_reward_tensor(
    spec: dict[str, Any], count: int, blob: dict[str, Tensor], used: set[str]
) -> list[Any]:
    return _decode_blob_column("reward", spec, count, blob, used)


def _decode_scalar(name: str, spec: Any, count: int) -> _Column:
    allowed, default = _SCALAR_COLUMNS[name]
    if spec is None:
        _require(default is not _REQUIRED or count == 0, f"required column {name!r} is missing")
        return _Same(default)
    form, payload = _column_spec(name, spec, count, ("v",) if name == _COUNTED_COLUMN else ("c", "v"))
    values = [payload] if form == "c" else payload
    kinds = set(map(type, values))
    _require(
        kinds <= allowed,
        f"column {name!r} holds values of a wrong type ({sorted(k.__name__ for k in kinds)})",
    )
    if name == "experience_type":
        _require(set(values) <= set(_EXPERIENCE_TYPES), f"column {name!r}: unknown experience type")
    return _Same(payload) if form == "c" else payload


def _decode_json_column(name: str, spec: Any, count: int) -> _Column:
    factory = _JSON_COLUMNS[name]
    if spec is None:
        return _Same(None)  # the default: build_experiences gives each item a fresh {} for info, metrics
    form, values = _column_spec(name, spec, count, ("j", "v"))
    if form == "v":
        try:
            values = [from_json_value(value) for value in values]
        except ValueError as exc:
            raise _Malformed(f"column {name!r}: {exc}") from exc
    if factory is dict:
        _require(set(map(type, values)) <= {dict}, f"column {name!r} must hold dicts")
    return values  # type: ignore[no-any-return]


def _decode_custom_fields(spec: Any, count: int) -> _Column:
    if spec is None:
        return _Same(None)  # the default: build_experiences gives each item a fresh []

    def parse(item: Any) -> list[CustomField]:
        _require(type(item) is list, "column 'custom_fields': each item must be a list")
        fields = []
        for entry in item:
            _require(
                type(entry) is list and len(entry) == 3 and all(type(part) is str for part in entry),
                "column 'custom_fields': entries must be [source_field, destination_field, dtype]",
            )
            dtype = TENSOR_DTYPES.get(entry[2])
            _require(dtype is not None, f"column 'custom_fields': dtype {entry[2]!r} is not allowed")
            fields.append(CustomField(entry[0], entry[1], dtype))  # type: ignore[arg-type]
        return fields

    form, payload = _column_spec("custom_fields", spec, count, ("c", "v"))
    if form == "c":
        shared = parse(payload)  # CustomField is frozen: items may share them, but not the list
        return [list(shared) for _ in range(count)]
    return [parse(item) for item in payload]


def _check_bool(tensor: Tensor, what: str) -> None:
    if tensor.dtype == torch.bool and tensor.numel():
        # numpy's reduction is vectorised for uint8; torch's max over uint8 is several times slower.
        _require(
            int(tensor.reshape(-1).view(torch.uint8).numpy().max()) <= 1, f"{what}: bool bytes must be 0 or 1"
        )


_DTYPES_BY_CODE: dict[str, torch.dtype] = {code: dtype for dtype, code in _SAFETENSORS_CODES.items()}
_MAX_DIMS = 64


def _read_safetensors(view: memoryview) -> dict[str, Tensor]:
    """Parse the safetensors blob of a payload into tensors, checking every rule of the format.

    The layout is safetensors' own (``u64`` header length, JSON header of ``dtype`` / ``shape`` /
    ``data_offsets`` per tensor, then the data, which the tensors must tile exactly with no gap or
    overlap). Reading it here instead of through ``safetensors.torch.load`` copies the data once, into
    one writable buffer that every tensor views, where the library makes two copies (into a new
    ``bytes`` and then per tensor). Every offset, size, dtype code and shape is validated before any
    tensor is made; offsets must also be aligned to the element size, which our writer guarantees.
    """
    _require(len(view) >= 8, f"safetensors blob of {len(view)} bytes is shorter than its 8-byte length")
    (header_len,) = struct.unpack_from("<Q", view)
    _require(header_len <= len(view) - 8, f"safetensors header length {header_len} exceeds the blob")
    header = json.loads(bytes(view[8 : 8 + header_len]))
    _require(type(header) is dict, "safetensors header must be a JSON object")
    header.pop("__metadata__", None)
    data_len = len(view) - 8 - header_len
    spans: list[tuple[int, int, str, torch.dtype, list[int]]] = []
    for name, entry in header.items():
        what = f"safetensors entry {name!r}"
        _require(
            type(entry) is dict and entry.keys() == {"dtype", "shape", "data_offsets"}, f"{what}: bad keys"
        )
        dtype = _DTYPES_BY_CODE.get(entry["dtype"]) if type(entry["dtype"]) is str else None
        _require(dtype is not None, f"{what}: dtype {entry['dtype']!r} is not allowed")
        assert dtype is not None
        shape = entry["shape"]
        _require(type(shape) is list and len(shape) <= _MAX_DIMS, f"{what}: shape must be a short list")
        _ints(shape, f"{what}.shape")
        _require(all(dim >= 0 for dim in shape), f"{what}: negative dimension")
        offsets = _ints(entry["data_offsets"], f"{what}.data_offsets")
        _require(len(offsets) == 2, f"{what}: data_offsets must be [begin, end]")
        begin, end = offsets
        _require(0 <= begin <= end <= data_len, f"{what}: data_offsets {offsets} outside 0..{data_len}")
        _require(end - begin == _numel(shape) * dtype.itemsize, f"{what}: byte size does not match its shape")
        _require(begin % dtype.itemsize == 0, f"{what}: data is not aligned to its element size")
        spans.append((begin, end, name, dtype, shape))
    spans.sort()
    position = 0
    for begin, end, name, _, _ in spans:
        _require(begin == position, f"safetensors entry {name!r} leaves a gap or overlaps at byte {position}")
        position = end
    _require(position == data_len, f"safetensors data has {data_len - position} trailing bytes")
    buffer = bytearray(view[8 + header_len :])
    tensors: dict[str, Tensor] = {}
    for begin, end, name, dtype, shape in spans:
        if end == begin:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            flat = torch.frombuffer(buffer, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=begin)
            tensors[name] = flat.view(shape)
    return tensors


def _blob_tensor(blob: dict[str, Tensor], key: str, used: set[str]) -> Tensor:
    tensor = blob.get(key)
    _require(tensor is not None, f"tensor {key!r} is missing from the safetensors blob")
    assert tensor is not None
    _require(
        tensor.dtype in _DTYPE_NAMES, f"tensor {key!r} has a dtype outside the allow-list: {tensor.dtype}"
    )
    _require(key not in used, f"tensor {key!r} is used twice")
    _check_bool(tensor, f"tensor {key!r}")
    used.add(key)
    return tensor


def _shapes(value: Any, rows: int, what: str) -> list[list[int]]:
    _require(type(value) is list and len(value) == rows, f"{what}: needs one shape per item ({rows})")
    for shape in value:
        _require(
            type(shape) is list and len(shape) <= 64, f"{what}: each shape must be a list of at most 64 ints"
        )
        _ints(shape, what)
        _require(all(dim >= 0 for dim in shape), f"{what}: negative dimension")
    return value  # type: ignore[no-any-return]


def _split_flat(flat: Tensor, spec: dict[str, Any], kind: str, rows: int, what: str) -> Sequence[Tensor]:
    """Cut a field's flat tensor into per-item slices (no copies).

    ``unsafe_split`` makes the same disjoint slices as ``split`` without registering them as
    multi-output views of ``flat``, which nothing else ever sees: cheaper to make and to free, and an
    in-place op on one item's tensor under autograd behaves as on any tensor instead of raising.
    """
    total = flat.numel()
    if rows == 0:
        _require(total == 0, f"{what}: no items, but the blob holds {total} elements")
        return []
    if kind == "len":
        length = spec["len"]
        _require(type(length) is int and length >= 0, f"{what}: 'len' must be a non-negative int")
        _require(length * rows == total, f"{what}: {rows} items of length {length} != {total} elements")
        return flat.unsafe_split(length) if length else flat.unsafe_split_with_sizes([0] * rows)
    if kind == "lens":
        lens = _ints(spec["lens"], f"{what}.lens")
        _require(len(lens) == rows, f"{what}: {len(lens)} lengths for {rows} items")
        _require(min(lens) >= 0, f"{what}: negative length")
        _require(sum(lens) == total, f"{what}: lengths sum to {sum(lens)}, blob holds {total} elements")
        return flat.unsafe_split_with_sizes(lens)
    if kind == "shapes":
        shapes = _shapes(spec["shapes"], rows, f"{what}.shapes")
        sizes = [_numel(shape) for shape in shapes]
        _require(sum(sizes) == total, f"{what}: shapes hold {sum(sizes)} elements, blob holds {total}")
        parts = flat.unsafe_split_with_sizes(sizes)
        return [part.view(shape) for part, shape in zip(parts, shapes, strict=True)]
    raise _Malformed(f"{what}: unknown layout {kind!r} (expected 'len', 'lens' or 'shapes')")


def _decode_tensor_field(
    field: str, spec: Any, count: int, blob: dict[str, Tensor], used: set[str]
) -> _Column:
    what = f"tensor field {field!r}"
    _require(type(spec) is dict, f"{what}: spec must be an object")
    present = _presence(spec, count, what)
    if spec.get("per_item") is True:
        _require(spec.keys() == {"present", "per_item"}, f"{what}: unexpected keys {sorted(spec)}")
        indices = range(count) if present is None else present
        column: list[Any] = [None] * count
        for index in indices:
            column[index] = _blob_tensor(blob, f"{field}.{index}", used)
        return column
    layout = spec.keys() - {"present", "dtype"}
    _require("dtype" in spec and len(layout) == 1, f"{what}: unexpected keys {sorted(spec)}")
    dtype_name = spec["dtype"]
    dtype = TENSOR_DTYPES.get(dtype_name) if type(dtype_name) is str else None
    _require(dtype is not None, f"{what}: dtype {dtype_name!r} is not allowed")
    flat = _blob_tensor(blob, field, used)
    _require(flat.dtype == dtype and flat.dim() == 1, f"{what}: blob tensor is not a 1-D {dtype_name} tensor")
    items = _split_flat(flat, spec, next(iter(layout)), count if present is None else len(present), what)
    if present is None:
        return list(items)
    column = [None] * count
    for index, item in zip(present, items, strict=True):
        column[index] = item
    return column


def _decode_multi_modal(spec: Any, count: int, blob: dict[str, Tensor], used: set[str]) -> _Column:
    if spec is None:
        return _Same(None)
    _require(type(spec) is dict and spec.keys() == {"present", "keys"}, "'mm' must have 'present' and 'keys'")
    present = _presence(spec, count, "mm")
    indices = list(range(count)) if present is None else present
    keys = spec["keys"]
    _require(type(keys) is list and len(keys) == len(indices), "mm.keys: needs one key list per item")
    column: list[Any] = [None] * count
    for index, names in zip(indices, keys, strict=True):
        _require(type(names) is list and all(type(name) is str for name in names), "mm.keys: lists of str")
        _require(len(set(names)) == len(names), "mm.keys: duplicate key")
        column[index] = {
            name: _blob_tensor(blob, f"mm.{index}.{position}", used) for position, name in enumerate(names)
        }
    return column


def _split_payload(data: bytes) -> tuple[bytes, memoryview]:
    size = _PREFIX.size
    _require(len(data) >= size, f"payload of {len(data)} bytes is shorter than the {size}-byte prefix")
    magic, version, header_len, blob_len = _PREFIX.unpack_from(data)
    _require(magic == MAGIC, f"bad magic {magic!r}")
    _require(version == VERSION, f"unsupported version {version} (this reader knows version {VERSION})")
    _require(
        header_len <= MAX_HEADER_BYTES, f"header length {header_len} exceeds the limit {MAX_HEADER_BYTES}"
    )
    expected = size + header_len + blob_len
    _require(
        expected == len(data),
        f"the prefix's lengths ({header_len} + {blob_len}) need {expected} bytes; got {len(data)}",
    )
    view = memoryview(data)
    return bytes(view[size : size + header_len]), view[size + header_len :]


def _iterable(column: _Column, count: int) -> Iterable[Any]:
    return repeat(column.value, count) if isinstance(column, _Same) else column


def _decode(data: bytes) -> list[Experience]:
    header_bytes, blob_view = _split_payload(data)
    header = json.loads(header_bytes)
    _require(type(header) is dict, "header must be a JSON object")
    _require(
        header.keys() <= _HEADER_KEYS and {"n", "columns", "tensors"} <= header.keys(), "bad header keys"
    )
    count = header["n"]
    _require(type(count) is int and 0 <= count <= MAX_ITEMS, f"'n' must be an int in 0..{MAX_ITEMS}")
    columns, tensor_specs = header["columns"], header["tensors"]
    _require(type(columns) is dict, "'columns' must be an object")
    unknown = columns.keys() - _ALL_COLUMNS
    _require(not unknown, f"unknown columns {sorted(unknown)[:5]}")
    _require(type(tensor_specs) is dict, "'tensors' must be an object")
    unknown = tensor_specs.keys() - set(TENSOR_FIELDS)
    _require(not unknown, f"unknown tensor fields {sorted(unknown)[:5]}")

    # Columns first: the always-listed suffix column proves the header really has `count` items
    # before anything is built per item.
    fields: dict[str, _Column] = {}
    in_blob: dict[str, Any] = {}  # columns whose values are read from the blob below
    for name in _SCALAR_COLUMNS:
        spec = columns.get(name)
        if _is_blob_form(name, spec):
            in_blob[name] = spec
            continue
        fields[name] = _decode_scalar(name, spec, count)
    for name in _JSON_COLUMNS:
        fields[name] = _decode_json_column(name, columns.get(name), count)
    fields["custom_fields"] = _decode_custom_fields(columns.get("custom_fields"), count)

    blob = _read_safetensors(blob_view)
    used: set[str] = set()
    for field in TENSOR_FIELDS:
        spec = tensor_specs.get(field)
        fields[field] = _Same(None) if spec is None else _decode_tensor_field(field, spec, count, blob, used)
    fields["multi_modal_inputs"] = _decode_multi_modal(header.get("mm"), count, blob, used)
    for name, spec in in_blob.items():
        fields[name] = _decode_blob_column(name, spec, count, blob, used)
    unexpected = sorted(blob.keys() - used)[:5]
    _require(not unexpected, f"safetensors blob holds unexpected tensors: {unexpected}")
    _require(fields.keys() == _DECODED_NAMES, "internal error: decoded fields do not match Experience")
    return build_experiences({name: _iterable(column, count) for name, column in fields.items()})


# -------------------------------------------------------------------------------------- legacy (unsafe)


def _legacy_hint(data: bytes) -> str | None:
    if data[:4] == LEGACY_MAGIC:
        return "it looks like a legacy trinity-rft payload (magic b'TRXP', pickled metadata)"
    if data[:1] == b"\x80":
        return "it looks like a raw pickle (a legacy trinity-rft Experience payload)"
    return None


def _legacy_dtype(name: Any) -> torch.dtype:
    dtype = TENSOR_DTYPES.get(str(name).removeprefix("torch."))
    if dtype is None:
        raise ExperienceDecodeError(f"legacy payload: custom field dtype {name!r} is not allowed")
    return dtype


def _legacy_custom(fields: Any) -> list[CustomField]:
    out = []
    for item in fields or []:
        if isinstance(item, dict):
            source, destination, dtype = item["source_field"], item["destination_field"], item["data_type"]
        else:
            source, destination, dtype = item.source_field, item.destination_field, item.data_type
        resolved = dtype if isinstance(dtype, torch.dtype) and dtype in _DTYPE_NAMES else _legacy_dtype(dtype)
        out.append(CustomField(source, destination, resolved))
    return out


def _warn_routed(index: int) -> None:
    warnings.warn(
        f"legacy experience {index}: 'routed_experts' is not a trinity-core field and was dropped",
        stacklevel=4,
    )


def _read_trxp(data: bytes) -> list[Experience]:
    if len(data) < _PREFIX.size:
        raise ExperienceDecodeError("legacy TRXP payload is truncated")
    _, version, meta_len, tensor_len = _PREFIX.unpack_from(data)
    if version != 1 or _PREFIX.size + meta_len + tensor_len != len(data):
        raise ExperienceDecodeError(f"legacy TRXP payload: bad version {version} or lengths")
    meta = pickle.loads(data[_PREFIX.size : _PREFIX.size + meta_len])  # unsafe, explicit opt-in
    tensors = _st_load(data[_PREFIX.size + meta_len :])
    out = []
    for index, item in enumerate(meta["items"]):
        kwargs: dict[str, Any] = {
            name: item.get(name)
            for name in (
                "eid",
                "reward",
                "truncate_status",
                "info",
                "metrics",
                "response_text",
                "prompt_text",
                "messages",
                "tools",
                "chosen_messages",
                "rejected_messages",
            )
        }
        kwargs["prompt_length"] = item.get("prompt_length", 1)
        kwargs["custom_fields"] = _legacy_custom(item.get("custom_fields"))
        for field in TENSOR_FIELDS:
            kwargs[field] = tensors.get(f"{index}:{field}")
        if f"{index}:routed_experts" in tensors:
            _warn_routed(index)
        keys = item.get("multi_modal_input_keys") or []
        kwargs["multi_modal_inputs"] = (
            {k: tensors[f"{index}:multi_modal_inputs:{k}"] for k in keys} if keys else None
        )
        # The reference rebuilt items with its constructor; so do we (its payload has no experience_type).
        out.append(Experience(**kwargs))
    return out


def _from_legacy_object(obj: Any, index: int) -> Experience:
    if isinstance(obj, Experience):
        return obj
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict) or "tokens" not in attrs:
        raise ExperienceDecodeError(
            f"legacy pickle item {index} is a {type(obj).__name__}, not an Experience"
        )
    defaults: dict[str, Any] = {"prompt_length": 1, "info": {}, "metrics": {}, "custom_fields": []}
    fields = {name: attrs.get(name, defaults.get(name)) for name in experience_field_names()}
    eid = attrs.get("eid")
    fields["eid"] = (
        EID()
        if eid is None
        else EID(**{k: getattr(eid, k) for k in ("batch", "task", "run", "step", "suffix")})
    )
    fields["custom_fields"] = _legacy_custom(fields["custom_fields"])
    if fields["experience_type"] not in _EXPERIENCE_TYPES:
        fields["experience_type"] = "multi_turn" if fields["action_mask"] is not None else "single_turn"
    if attrs.get("routed_experts") is not None:
        _warn_routed(index)
    return Experience._restore(fields)


def _read_legacy(data: bytes) -> list[Experience]:
    if data[:4] == LEGACY_MAGIC:
        return _read_trxp(data)
    obj = pickle.loads(data)  # unsafe, explicit opt-in
    items = obj if isinstance(obj, list) else [obj]
    return [_from_legacy_object(item, index) for index, item in enumerate(items)]


def deserialize_many(data: bytes, *, allow_pickle: bool = False) -> list[Experience]:
    """Decode a payload written by :func:`serialize_many` into a list of experiences.

    Each item's tensors are disjoint slices of one flat tensor per field (no per-item copies), plain
    tensors that share its storage. Any malformed, truncated,
    oversized or adversarial input raises :class:`ExperienceDecodeError`, never anything else, and no
    code from the payload ever runs.

    ``allow_pickle=True`` additionally reads the reference implementation's payloads: the ``b"TRXP"``
    format with pickled metadata and bare pickles of an ``Experience`` or a list of them. **This is unsafe:
    unpickling runs arbitrary code chosen by whoever wrote the payload.** Use it only to migrate data you
    trust; without it such payloads raise :class:`ExperienceDecodeError` saying how to opt in.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ExperienceDecodeError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:4] != MAGIC:
        hint = _legacy_hint(data)
        if allow_pickle and data:
            try:
                return _read_legacy(data)
            except ExperienceDecodeError:
                raise
            except Exception as exc:
                raise ExperienceDecodeError(
                    f"could not read legacy payload: {type(exc).__name__}: {exc}"
                ) from exc
        if hint is not None:
            raise ExperienceDecodeError(
                f"not a trinity-core experience payload: {hint}. Reading it requires unpickling, which can "
                "run arbitrary code; if and only if you trust its source, pass allow_pickle=True"
            )
        raise ExperienceDecodeError(
            f"not a trinity-core experience payload: bad magic {data[:4]!r}, expected {MAGIC!r}"
        )
    # Decoding creates a few objects per item and field; the cyclic collector would otherwise run many
    # full passes over them (it doubled decode time). Nothing here creates reference cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _decode(data)
    except _Malformed as exc:
        raise ExperienceDecodeError(f"malformed experience payload: {exc}") from None
    except Exception as exc:
        raise ExperienceDecodeError(f"malformed experience payload: {type(exc).__name__}: {exc}") from exc
    finally:
        if collecting:
            gc.enable()
