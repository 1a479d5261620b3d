"""The fixed parts of the wire format: magic, limits, dtype tables, column tables and the two errors.

Everything here is data the encoder and the decoder share; nothing is read from a payload by name except
through these tables.
"""

from __future__ import annotations

import struct
from typing import Any

import torch

from trinity_core.jsonvalue import TORCH_DTYPES

__all__ = [
    "LEGACY_MAGIC",
    "MAGIC",
    "MAX_HEADER_BYTES",
    "MAX_ITEMS",
    "MAX_JSON_DEPTH",
    "TENSOR_DTYPES",
    "VERSION",
    "ExperienceDecodeError",
    "ExperienceEncodeError",
]

#: First four bytes of every payload.
MAGIC = b"TRXC"
#: Format version written by this package (the only one it reads).
VERSION = 1
#: Magic of the reference implementation's payloads (pickled metadata); read only with ``allow_pickle``.
LEGACY_MAGIC = b"TRXP"
#: Largest JSON header accepted, in bytes.
MAX_HEADER_BYTES = 1 << 30
#: Largest number of experiences in one payload.
MAX_ITEMS = 1 << 24
#: Deepest nesting of arrays and objects in the JSON header and the safetensors header. The header's
#: own structure takes 4 levels above a free-form value (``{"columns": {"info": {"v": [value]}}}``),
#: so ``info``, ``metrics``, messages and tools may nest 124 levels, tags included. The reader checks
#: it before parsing, so no payload can make the parser or the tag decoder recurse deeper.
MAX_JSON_DEPTH = 128

#: ``magic | u8 version | u64 LE header length | u64 LE blob length``.
PREFIX = struct.Struct("<4sBQQ")
#: Tensor dtypes accepted in tensor fields, multi-modal inputs and custom fields (what safetensors stores).
TENSOR_DTYPES: dict[str, torch.dtype] = {
    name: dtype for name, dtype in TORCH_DTYPES.items() if dtype is not torch.complex128
}
DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in TENSOR_DTYPES.items()}
#: safetensors' codes of the dtypes in :data:`TENSOR_DTYPES`.
SAFETENSORS_CODES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "C64": torch.complex64,
}
EXPERIENCE_TYPES = ("single_turn", "multi_turn", "dpo")
NONE = type(None)

#: Marks a scalar column that must be present whenever the payload holds experiences.
REQUIRED = object()
#: Scalar columns: name on the wire -> (allowed types, default or :data:`REQUIRED`).
SCALAR_COLUMNS: dict[str, tuple[frozenset[type], Any]] = {
    "eid.batch": (frozenset({int, str}), REQUIRED),
    "eid.task": (frozenset({int, str}), REQUIRED),
    "eid.run": (frozenset({int, str}), REQUIRED),
    "eid.step": (frozenset({int, str}), REQUIRED),
    "eid.suffix": (frozenset({str}), REQUIRED),
    "prompt_length": (frozenset({int}), REQUIRED),
    "experience_type": (frozenset({str}), REQUIRED),
    "reward": (frozenset({float, int, NONE}), None),
    "truncate_status": (frozenset({str, NONE}), None),
    "response_text": (frozenset({str, NONE}), None),
    "prompt_text": (frozenset({str, NONE}), None),
}
#: Free-form columns (tagged JSON, one fresh value per item): name -> default factory (dict) or None.
JSON_COLUMNS: dict[str, type[dict[str, Any]] | None] = {
    "info": dict,
    "metrics": dict,
    "messages": None,
    "tools": None,
    "chosen_messages": None,
    "rejected_messages": None,
}
#: Blob forms of scalar columns: form -> (the one Python type of the values, ``array`` typecode, dtype).
BLOB_FORMS: dict[str, tuple[type, str, torch.dtype]] = {
    "f64": (float, "d", torch.float64),
    "i64": (int, "q", torch.int64),
}
#: Columns that travel as one tensor of the blob (``{form: "column.<name>"}``) when their values vary and
#: all have the form's type: bit-exact floats (NaN payloads and -0.0 kept), and far cheaper than writing
#: and parsing thousands of number literals in the JSON header.
BLOB_COLUMNS: dict[str, str] = {
    "eid.batch": "i64",
    "eid.task": "i64",
    "eid.run": "i64",
    "eid.step": "i64",
    "prompt_length": "i64",
    "reward": "f64",
}
#: Always written as a full list, so that the header's size bounds the number of experiences it can
#: claim (a few bytes of header can never make the decoder build millions of objects).
COUNTED_COLUMN = "eid.suffix"
ALL_COLUMNS = frozenset({*SCALAR_COLUMNS, *JSON_COLUMNS, "custom_fields"})


def blob_key(column: str) -> str:
    """The name of the blob tensor that holds column ``column`` in its blob form."""
    return f"column.{column}"


class ExperienceDecodeError(ValueError):
    """A payload is not a valid experience payload (malformed, truncated, oversized or not allowed)."""


class ExperienceEncodeError(TypeError):
    """An experience holds a value the wire format cannot write; the message names the item and field."""


class Malformed(Exception):
    """Internal: a structural check failed (turned into ExperienceDecodeError with context)."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`Malformed` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise Malformed(message)


def encode_error(index: int, field: str, message: str) -> ExperienceEncodeError:
    """An :class:`ExperienceEncodeError` that names item ``index`` and its ``field``."""
    return ExperienceEncodeError(f"experiences[{index}].{field}: {message}")


def ints(values: Any, what: str) -> list[int]:
    """``values`` checked to be a list of ints."""
    require(type(values) is list, f"{what} must be a list")
    require(set(map(type, values)) <= {int}, f"{what} must hold only ints")
    return values  # type: ignore[no-any-return]


def numel(shape: list[int]) -> int:
    """Number of elements of a tensor of ``shape``."""
    total = 1
    for dim in shape:
        total *= dim
    return total
