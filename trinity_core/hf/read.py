"""A Hugging Face dataset back to experiences: :func:`from_hf_datasets` (layout: :mod:`trinity_core.hf`)."""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from trinity_core import jsonvalue
from trinity_core.experience import EID, TENSOR_FIELDS, CustomField, Experience, experience_field_names
from trinity_core.hf.layout import (
    ARROW_TYPES,
    BIT_STORED,
    EXPERIENCE_TYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    JSON_FIELDS,
    METADATA_KEY,
    SCALAR_COLUMNS,
    TEXT_FIELDS,
    TORCH_OF_ARROW,
)

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["from_hf_datasets"]


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
    own = json.loads(raw).get(METADATA_KEY)
    if own is None:
        return None
    if not isinstance(own, dict) or own.get("format") != FORMAT_NAME:
        raise ValueError(f"from_hf_datasets: unrecognised {METADATA_KEY!r} schema metadata: {own!r}")
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
    bit_name = next((b for b in BIT_STORED if f"{field}__{b}" in table.column_names), None)
    column_name = field if bit_name is None else f"{field}__{bit_name}"
    array = table.column(column_name).combine_chunks()
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise ValueError(
            f"from_hf_datasets: column {column_name!r} has type {array.type}; a list column is needed"
        )
    value_type = array.type.value_type
    if bit_name is not None:
        dtype, storage = BIT_STORED[bit_name]
    elif array.null_count == n:
        return [None] * n
    else:
        found = TORCH_OF_ARROW.get(value_type)
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
    if ARROW_TYPES[storage] != value_type:
        raise ValueError(
            f"from_hf_datasets: column {column_name!r} holds {value_type}, expected {ARROW_TYPES[storage]}"
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
    missing = [c for c in SCALAR_COLUMNS if c not in table.column_names]
    missing += [
        f
        for f in TENSOR_FIELDS
        if f not in table.column_names and not any(f"{f}__{b}" in table.column_names for b in BIT_STORED)
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
    bad = next((t for t in types if t not in EXPERIENCE_TYPES), None)
    if bad is not None:
        raise ValueError(
            f"from_hf_datasets: unknown experience_type {bad!r}; expected one of {EXPERIENCE_TYPES}"
        )
    eid_batch = _ids(col("eid_batch"), col("eid_batch_int"))
    eid_task = _ids(col("eid_task"), col("eid_task_int"))
    columns: dict[str, list[Any]] = {
        "experience_type": types,
        "prompt_length": col("prompt_length"),
        "reward": col("reward"),
        "custom_fields": _custom_fields(col("custom_fields")),
    }
    for name in TEXT_FIELDS:
        columns[name] = col(name)
    for name in (*JSON_FIELDS, "multi_modal_inputs"):
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
