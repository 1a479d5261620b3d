"""Experiences as Hugging Face datasets: :func:`to_hf_datasets` and :func:`from_hf_datasets`.

The table is built column by column from flat arrays (one ``torch.cat`` per tensor field, list offsets
from the lengths), never row by row, and every field round-trips exactly. Layout (one row per
experience):

==============================  =========================================================================
column                          content
==============================  =========================================================================
``eid_batch``, ``eid_task``     the id component as text; ``eid_batch_int`` / ``eid_task_int`` (bool)
                                say it was an ``int`` (so ``3`` and ``"3"`` stay apart)
``eid_run``, ``eid_step``       int64
``eid_suffix``                  text
``experience_type``             ``single_turn`` / ``multi_turn`` / ``dpo``
``prompt_length``               int64
``reward``                      float64, null for None
``truncate_status``,            text or null
``prompt_text``,
``response_text``
tensor fields (``tokens``,      ``large_list<T>`` of the flattened tensor, null for None. ``T`` is the
``logprobs``, ``action_mask``,  arrow type of the tensor dtype (bool, (u)int8-64, float16/32/64). A
``advantages``, ``returns``,    bfloat16 field is stored as its raw bits, ``large_list<uint16>``, in a
``token_level_reward``,         column named ``<field>__bfloat16``. A field with a tensor that is not
``teacher_logprobs``,           1-D gets a ``<field>__shape`` column (``list<int64>``, the shape).
``chosen``, ``rejected``
``info``, ``metrics``,          JSON text written with :mod:`trinity_core.jsonvalue` (tagged values
``messages``, ``tools``,        restore tuples, tensors, non-string keys ...), null for None. Text, not
``chosen_messages``,            arrow structs, so rows with different keys stay as they were (arrow would
``rejected_messages``,          unify the keys and fill missing ones with None).
``multi_modal_inputs``
``custom_fields``               JSON list of ``[source_field, destination_field, dtype_name]``
==============================  =========================================================================

The schema metadata (inside the ``huggingface`` entry, the only one ``datasets`` keeps) records the
format name, its version and each tensor field's dtype. Dtype names are looked up in an allow-list
(:data:`trinity_core.jsonvalue.TORCH_DTYPES`), never with ``getattr``. ``datasets`` drops schema metadata
in ``map``, ``save_to_disk`` and parquet files; the dtypes then come from the arrow types and column
names, which carry the same information. All tensors of one field must share a dtype (an arrow column
has one type); cast them first otherwise.

:func:`from_hf_datasets` also reads *plain* datasets written by other tools: columns named like the
:class:`~trinity_core.experience.Experience` constructor keywords (``tokens``, ``prompt_length``,
``reward``, ``logprobs``, ``eid`` as a dict, ...), converted by the constructor.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from trinity_core import jsonvalue
from trinity_core.experience import (
    EID,
    TENSOR_FIELDS,
    CustomField,
    Experience,
    experience_field_names,
)

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "from_hf_datasets", "to_hf_datasets"]

#: Name and version of the column layout, stored in the schema metadata.
FORMAT_NAME = "trinity_core.experiences"
FORMAT_VERSION = 1
_METADATA_KEY = "trinity_core"

_ARROW_TYPES: dict[torch.dtype, pa.DataType] = {
    torch.bool: pa.bool_(),
    torch.int8: pa.int8(),
    torch.int16: pa.int16(),
    torch.int32: pa.int32(),
    torch.int64: pa.int64(),
    torch.uint8: pa.uint8(),
    torch.uint16: pa.uint16(),
    torch.uint32: pa.uint32(),
    torch.uint64: pa.uint64(),
    torch.float16: pa.float16(),
    torch.float32: pa.float32(),
    torch.float64: pa.float64(),
}
_TORCH_OF_ARROW: dict[pa.DataType, torch.dtype] = {v: k for k, v in _ARROW_TYPES.items()}
#: Dtypes without an arrow type, stored as raw bits in a column named ``<field>__<dtype name>``.
_BIT_STORED: dict[str, tuple[torch.dtype, torch.dtype]] = {"bfloat16": (torch.bfloat16, torch.uint16)}
_DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in jsonvalue.TORCH_DTYPES.items()}
#: Arrow type of an all-None tensor column (the type is irrelevant then; these match the constructor).
_DEFAULT_DTYPES: dict[str, torch.dtype] = {
    "tokens": torch.int32,
    "chosen": torch.int32,
    "rejected": torch.int32,
    "action_mask": torch.bool,
}

_JSON_FIELDS = ("info", "metrics", "messages", "tools", "chosen_messages", "rejected_messages")
_TEXT_FIELDS = ("truncate_status", "prompt_text", "response_text")
_SCALAR_COLUMNS = (
    "eid_batch",
    "eid_batch_int",
    "eid_task",
    "eid_task_int",
    "eid_run",
    "eid_step",
    "eid_suffix",
    "experience_type",
    "prompt_length",
    "reward",
    *_TEXT_FIELDS,
    *_JSON_FIELDS,
    "multi_modal_inputs",
    "custom_fields",
)
_EXPERIENCE_TYPES = ("single_turn", "multi_turn", "dpo")


# --------------------------------------------------------------------------------------------------
# writing


def _strings(values: Sequence[str | None]) -> pa.Array:
    return pa.array(values, type=pa.large_string())


def _id_column(values: Sequence[Any], name: str) -> tuple[pa.Array, pa.Array]:
    """Text and is-int flag of the EID component ``name`` (``int`` or ``str``)."""
    for i, v in enumerate(values):
        if type(v) is not int and type(v) is not str:
            raise TypeError(
                f"to_hf_datasets: experiences[{i}].eid.{name} is {v!r} ({type(v).__name__}); an EID "
                f"component must be an int or a str"
            )
    return _strings([str(v) for v in values]), pa.array([type(v) is int for v in values], type=pa.bool_())


def _json_column(values: Sequence[Any], name: str) -> pa.Array:
    """JSON text per row (tagged encoding), null for None; empty dicts and lists skip the encoder."""
    out: list[str | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
        elif not v and type(v) is dict:
            out.append("{}")
        elif not v and type(v) is list:
            out.append("[]")
        else:
            out.append(jsonvalue.dumps(v, f"experiences[{i}].{name}"))
    return _strings(out)


def _custom_fields_column(values: Sequence[list[CustomField]]) -> pa.Array:
    cache: dict[tuple[CustomField, ...], str] = {}
    out: list[str] = []
    for i, fields in enumerate(values):
        key = tuple(fields)
        text = cache.get(key)
        if text is None:
            encoded = []
            for f in key:
                name = _DTYPE_NAMES.get(f.data_type)
                if name is None:
                    raise TypeError(
                        f"to_hf_datasets: experiences[{i}].custom_fields has dtype {f.data_type}, which "
                        f"cannot be stored; use one of {sorted(jsonvalue.TORCH_DTYPES)}"
                    )
                encoded.append([f.source_field, f.destination_field, name])
            text = cache[key] = json.dumps(encoded)
        out.append(text)
    return _strings(out)


def _tensor_columns(field: str, values: Sequence[Tensor | None]) -> tuple[dict[str, pa.Array], str | None]:
    """Arrow columns of one tensor field and the field's dtype name (None when every value is None)."""
    n = len(values)
    present = [v for v in values if v is not None]
    if not present:
        arrow = _ARROW_TYPES[_DEFAULT_DTYPES.get(field, torch.float32)]
        return {field: pa.nulls(n, type=pa.large_list(arrow))}, None
    dtype = present[0].dtype
    if any(v.dtype != dtype for v in present):
        other = next(v.dtype for v in present if v.dtype != dtype)
        raise TypeError(
            f"to_hf_datasets: {field} mixes dtypes {dtype} and {other} across experiences; a dataset column "
            f"holds one dtype: cast them to one (e.g. exp.{field} = exp.{field}.to({dtype}))"
        )
    name = _DTYPE_NAMES.get(dtype)
    if name is None or (dtype not in _ARROW_TYPES and name not in _BIT_STORED):
        stored = sorted({*(_DTYPE_NAMES[d] for d in _ARROW_TYPES), *_BIT_STORED})
        raise TypeError(
            f"to_hf_datasets: {field} has dtype {dtype}, which cannot be stored; use one of {stored}"
        )
    multi_dim = any(v.dim() != 1 for v in present)
    flat = torch.cat([v.reshape(-1) for v in present] if multi_dim else present).cpu()
    column = field
    if name in _BIT_STORED:
        flat = flat.view(_BIT_STORED[name][1])
        column = f"{field}__{name}"
    lengths = np.fromiter((0 if v is None else v.numel() for v in values), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    mask = None if len(present) == n else pa.array([v is None for v in values], type=pa.bool_())
    columns = {column: pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat.numpy()), mask=mask)}
    if multi_dim:
        shapes = [None if v is None else list(v.shape) for v in values]
        columns[f"{field}__shape"] = pa.array(shapes, type=pa.list_(pa.int64()))
    return columns, name


def to_hf_datasets(experiences: Sequence[Experience]) -> Dataset:
    """Convert experiences to a ``datasets.Dataset`` with one row per experience, keeping every field.

    The layout is described in the module docstring; :func:`from_hf_datasets` restores equal experiences
    (``experience_type``, EID component types, tensor dtypes and shapes, custom field dtypes included).
    Raises TypeError for a value that cannot be stored (naming the experience and field).
    """
    from datasets import Dataset
    from datasets.table import InMemoryTable

    exps = list(experiences)
    eids = [e.eid for e in exps]
    columns: dict[str, pa.Array] = {}
    columns["eid_batch"], columns["eid_batch_int"] = _id_column([e.batch for e in eids], "batch")
    columns["eid_task"], columns["eid_task_int"] = _id_column([e.task for e in eids], "task")
    columns["eid_run"] = pa.array([e.run for e in eids], type=pa.int64())
    columns["eid_step"] = pa.array([e.step for e in eids], type=pa.int64())
    columns["eid_suffix"] = _strings([e.suffix for e in eids])
    columns["experience_type"] = _strings([e.experience_type for e in exps])
    columns["prompt_length"] = pa.array([e.prompt_length for e in exps], type=pa.int64())
    columns["reward"] = pa.array([None if e.reward is None else float(e.reward) for e in exps], pa.float64())
    for name in _TEXT_FIELDS:
        columns[name] = _strings([getattr(e, name) for e in exps])
    dtypes: dict[str, str] = {}
    for name in TENSOR_FIELDS:
        tensor_columns, dtype_name = _tensor_columns(name, [getattr(e, name) for e in exps])
        columns.update(tensor_columns)
        if dtype_name is not None:
            dtypes[name] = dtype_name
    for name in _JSON_FIELDS:
        columns[name] = _json_column([getattr(e, name) for e in exps], name)
    columns["multi_modal_inputs"] = _json_column([e.multi_modal_inputs for e in exps], "multi_modal_inputs")
    columns["custom_fields"] = _custom_fields_column([e.custom_fields for e in exps])

    own = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "dtypes": dtypes}
    table = pa.table(columns).replace_schema_metadata({"huggingface": json.dumps({_METADATA_KEY: own})})
    # A random fingerprint: datasets would otherwise hash (pickle) the whole table.
    return Dataset(InMemoryTable(table), fingerprint=uuid.uuid4().hex[:16])


# --------------------------------------------------------------------------------------------------
# reading


def _table(dataset: Dataset) -> pa.Table:
    """The dataset's rows as one arrow table (selections and shuffles applied)."""
    if len(dataset) == 0:
        return dataset.data.table.slice(0, 0)
    table = dataset.with_format("arrow")[:]
    assert isinstance(table, pa.Table)
    return table


def _own_metadata(dataset: Dataset) -> dict[str, Any] | None:
    metadata = dataset.data.schema.metadata or {}
    raw = metadata.get(b"huggingface")
    if raw is None:
        return None
    own = json.loads(raw).get(_METADATA_KEY)
    if own is None:
        return None
    if not isinstance(own, dict) or own.get("format") != FORMAT_NAME:
        raise ValueError(f"from_hf_datasets: unrecognised {_METADATA_KEY!r} schema metadata: {own!r}")
    version = own.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"from_hf_datasets: the dataset uses format version {version!r}; this trinity-core reads up to "
            f"{FORMAT_VERSION}: upgrade trinity-core"
        )
    return own


def _dtype_by_name(name: Any, field: str) -> torch.dtype:
    dtype = jsonvalue.TORCH_DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise ValueError(
            f"from_hf_datasets: field {field!r} has dtype {name!r}, which is not allowed "
            f"({', '.join(jsonvalue.TORCH_DTYPES)})"
        )
    return dtype


def _read_tensor_field(table: pa.Table, field: str, recorded: str | None) -> list[Tensor | None]:
    """Per-row tensors of ``field``: views into one flat tensor (one copy out of arrow)."""
    n = table.num_rows
    bit_name = next((b for b in _BIT_STORED if f"{field}__{b}" in table.column_names), None)
    column_name = field if bit_name is None else f"{field}__{bit_name}"
    array = table.column(column_name).combine_chunks()
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise ValueError(
            f"from_hf_datasets: column {column_name!r} has type {array.type}; a list column is needed"
        )
    value_type = array.type.value_type
    if bit_name is not None:
        dtype, storage = _BIT_STORED[bit_name]
    elif array.null_count == n:
        return [None] * n
    else:
        found = _TORCH_OF_ARROW.get(value_type)
        if found is None:
            raise ValueError(
                f"from_hf_datasets: column {field!r} holds {value_type}, not a supported tensor dtype"
            )
        dtype = storage = found
    if recorded is not None and _dtype_by_name(recorded, field) != dtype:
        raise ValueError(
            f"from_hf_datasets: the metadata says {field!r} is {recorded} but column {column_name!r} holds "
            f"{value_type}; the dataset was altered"
        )
    if _ARROW_TYPES[storage] != value_type:
        raise ValueError(
            f"from_hf_datasets: column {column_name!r} holds {value_type}, expected {_ARROW_TYPES[storage]}"
        )
    offsets = array.offsets.to_numpy()
    start, stop = int(offsets[0]), int(offsets[-1])
    values = array.values.slice(start, stop - start).to_numpy(zero_copy_only=False)
    flat = torch.from_numpy(np.array(values, copy=True)).view(dtype)
    rows: list[Tensor | None] = list(torch.split(flat, np.diff(offsets).tolist()))
    if array.null_count:
        for i in np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False)).tolist():
            rows[i] = None
    shape_name = f"{field}__shape"
    if shape_name in table.column_names:
        for i, shape in enumerate(table.column(shape_name).to_pylist()):
            row = rows[i]
            if shape is not None and row is not None:
                rows[i] = row.reshape(shape)
    return rows


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return jsonvalue.loads(text)


def _ids(texts: list[str], is_int: list[bool]) -> list[int | str]:
    return [int(t) if flag else t for t, flag in zip(texts, is_int, strict=True)]


def _custom_fields(texts: list[str]) -> list[list[CustomField]]:
    cache: dict[str, tuple[CustomField, ...]] = {}
    out: list[list[CustomField]] = []
    for text in texts:
        fields = cache.get(text)
        if fields is None:
            fields = cache[text] = tuple(
                CustomField(src, dst, _dtype_by_name(name, "custom_fields"))
                for src, dst, name in json.loads(text)
            )
        out.append(list(fields))
    return out


def _read_native(table: pa.Table, own: dict[str, Any] | None) -> list[Experience]:
    missing = [c for c in _SCALAR_COLUMNS if c not in table.column_names]
    missing += [
        f
        for f in TENSOR_FIELDS
        if f not in table.column_names and not any(f"{f}__{b}" in table.column_names for b in _BIT_STORED)
    ]
    if missing:
        raise ValueError(
            f"from_hf_datasets: the dataset is in the {FORMAT_NAME} format but lacks the columns {missing}; "
            f"write it with to_hf_datasets or keep those columns"
        )
    dtypes = {} if own is None else own.get("dtypes", {})

    def col(name: str) -> list[Any]:
        return table.column(name).to_pylist()  # type: ignore[no-any-return]

    types = col("experience_type")
    bad = next((t for t in types if t not in _EXPERIENCE_TYPES), None)
    if bad is not None:
        raise ValueError(
            f"from_hf_datasets: unknown experience_type {bad!r}; expected one of {_EXPERIENCE_TYPES}"
        )
    eid_batch = _ids(col("eid_batch"), col("eid_batch_int"))
    eid_task = _ids(col("eid_task"), col("eid_task_int"))
    columns: dict[str, list[Any]] = {
        "experience_type": types,
        "prompt_length": col("prompt_length"),
        "reward": col("reward"),
        "custom_fields": _custom_fields(col("custom_fields")),
    }
    for name in _TEXT_FIELDS:
        columns[name] = col(name)
    for name in (*_JSON_FIELDS, "multi_modal_inputs"):
        columns[name] = [_loads(t) for t in col(name)]
    for name in TENSOR_FIELDS:
        columns[name] = _read_tensor_field(table, name, dtypes.get(name))
    columns["eid"] = [
        EID(batch=b, task=t, run=r, step=s, suffix=x)
        for b, t, r, s, x in zip(
            eid_batch, eid_task, col("eid_run"), col("eid_step"), col("eid_suffix"), strict=True
        )
    ]
    names = experience_field_names()
    return [
        Experience._restore(dict(zip(names, row, strict=True)))
        for row in zip(*(columns[n] for n in names), strict=True)
    ]


_CONSTRUCTOR_KEYWORDS = tuple(p for p in inspect.signature(Experience.__init__).parameters if p != "self")
_CONSTRUCTOR_DTYPES: dict[str, torch.dtype] = {
    "tokens": torch.int32,
    "chosen": torch.int32,
    "rejected": torch.int32,
    "action_mask": torch.bool,
    "logprobs": torch.float32,
    "token_level_reward": torch.float32,
    "advantages": torch.float32,
    "returns": torch.float32,
    "teacher_logprobs": torch.float32,
}


def _read_plain(table: pa.Table) -> list[Experience]:
    present = set(table.column_names)
    required = ["tokens"] if {"chosen", "rejected"} <= present else ["tokens", "prompt_length"]
    missing = [c for c in required if c not in present]
    if missing:
        raise ValueError(
            f"from_hf_datasets: the dataset lacks the columns {missing}. It is not in the {FORMAT_NAME} "
            f"format (written by to_hf_datasets), so it is read as plain columns named like the Experience "
            f"keywords: it needs {required}; it has {sorted(present)}"
        )
    used = [k for k in _CONSTRUCTOR_KEYWORDS if k in present and k != "custom_fields"]
    out: list[Experience] = []
    for i, row in enumerate(table.select(used).to_pylist()):
        kwargs = {k: v for k, v in row.items() if v is not None}
        for name, dtype in _CONSTRUCTOR_DTYPES.items():
            if name in kwargs:
                kwargs[name] = torch.tensor(kwargs[name], dtype=dtype)
        try:
            out.append(Experience(**kwargs))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"from_hf_datasets: row {i} is not a valid experience: {exc}") from exc
    return out


def from_hf_datasets(dataset: Dataset) -> list[Experience]:
    """Convert a ``datasets.Dataset`` back to experiences.

    A dataset written by :func:`to_hf_datasets` (also after ``select``, ``shuffle``, ``filter``,
    ``save_to_disk`` / ``load_from_disk``) gives back equal experiences; tensors of one field are views
    into one buffer per field. Any other dataset is read as plain columns named like the
    :class:`~trinity_core.experience.Experience` keywords (``tokens`` and ``prompt_length`` required,
    the rest optional, other columns ignored) through the constructor. Raises ValueError naming missing
    columns or the first invalid row.
    """
    own = _own_metadata(dataset)
    table = _table(dataset)
    native = own is not None or all(
        c in table.column_names for c in ("eid_suffix", "experience_type", "eid_batch_int")
    )
    return _read_native(table, own) if native else _read_plain(table)
