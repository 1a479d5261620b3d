"""Decoding: :func:`deserialize_many` turns a payload back into experiences, checking everything first.

Decoding never unpickles, evaluates or looks anything up by a name taken from the payload except in
fixed allow-lists, and its work and memory are bounded by a small multiple of the payload's size: the
count of experiences is proven by a column that lists every one, values that every item shares are
kept once (frozen custom fields, empty tensors), and per-item lists of custom fields may hold at most
one entry per payload byte. Any malformed, truncated, oversized or adversarial input raises
:class:`ExperienceDecodeError`, and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any

from trinity_core.codec.blob import read_blob
from trinity_core.codec.columns import (
    Column,
    Same,
    decode_blob_column,
    decode_custom_fields,
    decode_json_column,
    decode_scalar,
    is_blob_form,
)
from trinity_core.codec.header import parse_header, split_payload
from trinity_core.codec.legacy import legacy_hint, read_legacy
from trinity_core.codec.spec import (
    ALL_COLUMNS,
    JSON_COLUMNS,
    MAGIC,
    SCALAR_COLUMNS,
    ExperienceDecodeError,
    Malformed,
    require,
)
from trinity_core.codec.tensors import decode_multi_modal, decode_tensor_field
from trinity_core.experience import EID, TENSOR_FIELDS, Experience, experience_field_names

__all__ = ["deserialize_many"]

_EID_NAMES = ("batch", "task", "run", "step", "suffix")
_NEW = object.__new__
#: Fields whose default is a mutable object that every experience must own.
_FRESH_DEFAULTS = {"info": dict, "metrics": dict, "custom_fields": list}


def _values(name: str, column: Column, count: int) -> Iterable[Any]:
    """The values of a decoded column, one per item; a fresh object each for a mutable default."""
    if not isinstance(column, Same):
        return column
    if column.value is None and name in _FRESH_DEFAULTS:
        factory = _FRESH_DEFAULTS[name]
        return (factory() for _ in range(count))
    return repeat(column.value, count)


def _experience(
    eid: Any,
    tokens: Any,
    prompt_length: Any,
    logprobs: Any,
    reward: Any,
    token_level_reward: Any,
    advantages: Any,
    returns: Any,
    truncate_status: Any,
    info: Any,
    metrics: Any,
    response_text: Any,
    prompt_text: Any,
    action_mask: Any,
    messages: Any,
    tools: Any,
    chosen: Any,
    rejected: Any,
    chosen_messages: Any,
    rejected_messages: Any,
    multi_modal_inputs: Any,
    teacher_logprobs: Any,
    custom_fields: Any,
    experience_type: Any,
) -> Experience:
    """An experience holding exactly these values: the constructor does not run, nothing is re-derived.

    One attribute store per field, written out: CPython keeps the values in the object itself (no
    ``__dict__`` is made, one object fewer for the garbage collector to visit) and specialises each store.
    """
    exp = _NEW(Experience)
    exp.eid = eid
    exp.tokens = tokens
    exp.prompt_length = prompt_length
    exp.logprobs = logprobs
    exp.reward = reward
    exp.token_level_reward = token_level_reward
    exp.advantages = advantages
    exp.returns = returns
    exp.truncate_status = truncate_status
    exp.info = info
    exp.metrics = metrics
    exp.response_text = response_text
    exp.prompt_text = prompt_text
    exp.action_mask = action_mask
    exp.messages = messages
    exp.tools = tools
    exp.chosen = chosen
    exp.rejected = rejected
    exp.chosen_messages = chosen_messages
    exp.rejected_messages = rejected_messages
    exp.multi_modal_inputs = multi_modal_inputs
    exp.teacher_logprobs = teacher_logprobs
    exp.custom_fields = custom_fields
    exp.experience_type = experience_type
    return exp


def _build(fields: dict[str, Column], count: int) -> list[Experience]:
    """Experiences holding exactly the decoded values (``experience_type`` included), one column at a time."""
    eids = map(EID, *(_values(f"eid.{name}", fields[f"eid.{name}"], count) for name in _EID_NAMES))
    columns = (_values(name, fields[name], count) for name in experience_field_names()[1:])
    return list(map(_experience, eids, *columns))


def _decode(data: bytes) -> list[Experience]:
    header_bytes, blob_bytes = split_payload(data)
    header = parse_header(header_bytes)
    count = header["n"]
    columns, tensor_specs = header["columns"], header["tensors"]
    unknown = columns.keys() - ALL_COLUMNS
    require(not unknown, f"unknown columns {sorted(unknown)[:5]}")
    unknown = tensor_specs.keys() - set(TENSOR_FIELDS)
    require(not unknown, f"unknown tensor fields {sorted(unknown)[:5]}")

    # Columns first: the always-listed suffix column proves the header really has `count` items
    # before anything is built per item.
    fields: dict[str, Column] = {}
    in_blob: dict[str, Any] = {}  # columns whose values are read from the blob below
    for name in SCALAR_COLUMNS:
        spec = columns.get(name)
        if is_blob_form(name, spec):
            in_blob[name] = spec
            continue
        fields[name] = decode_scalar(name, spec, count)
    for name in JSON_COLUMNS:
        fields[name] = decode_json_column(name, columns.get(name), count)
    fields["custom_fields"] = decode_custom_fields(columns.get("custom_fields"), count, len(data))

    blob = read_blob(blob_bytes)
    used: set[str] = set()
    for field in TENSOR_FIELDS:
        spec = tensor_specs.get(field)
        fields[field] = Same(None) if spec is None else decode_tensor_field(field, spec, count, blob, used)
    fields["multi_modal_inputs"] = decode_multi_modal(header.get("mm"), count, blob, used)
    for name, spec in in_blob.items():
        fields[name] = decode_blob_column(name, spec, count, blob, used)
    unexpected = sorted(blob.keys() - used)[:5]
    require(not unexpected, f"safetensors blob holds unexpected tensors: {unexpected}")
    return _build(fields, count)


def deserialize_many(data: bytes, *, allow_pickle: bool = False) -> list[Experience]:
    """Decode a payload written by :func:`~trinity_core.codec.serialize_many` into a list of experiences.

    Each item's tensors are disjoint slices of one flat tensor per field (no per-item copies), plain
    tensors that share its storage. Any malformed, truncated, oversized or adversarial input raises
    :class:`ExperienceDecodeError`, never anything else, and no code from the payload ever runs.

    ``allow_pickle=True`` additionally reads the reference implementation's payloads: the ``b"TRXP"``
    format with pickled metadata and bare pickles of an ``Experience`` or a list of them. **This is unsafe:
    unpickling runs arbitrary code chosen by whoever wrote the payload.** Use it only to migrate data you
    trust; without it such payloads raise :class:`ExperienceDecodeError` saying how to opt in.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ExperienceDecodeError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:4] != MAGIC:
        hint = legacy_hint(data)
        if allow_pickle and data:
            try:
                return read_legacy(data)
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
    try:
        return _decode(data)
    except Malformed as exc:
        raise ExperienceDecodeError(f"malformed experience payload: {exc}") from None
    except Exception as exc:
        raise ExperienceDecodeError(f"malformed experience payload: {type(exc).__name__}: {exc}") from exc


def deserialize_one(data: bytes, *, allow_pickle: bool = False) -> Experience:
    """Decode a payload that holds exactly one experience (anything else raises the decode error)."""
    items = deserialize_many(data, allow_pickle=allow_pickle)
    if len(items) != 1:
        raise ExperienceDecodeError(f"expected a payload of exactly 1 experience, found {len(items)}")
    return items[0]
