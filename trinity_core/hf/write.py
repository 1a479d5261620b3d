"""Experiences to a Hugging Face dataset: :func:`to_hf_datasets` (layout: :mod:`trinity_core.hf`).

The table is built column by column from flat arrays (one ``torch.cat`` per tensor field, list offsets
from the lengths), never row by row.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from trinity_core import jsonvalue
from trinity_core.experience import TENSOR_FIELDS, CustomField, Experience
from trinity_core.extras import require_extra
from trinity_core.hf.layout import (
    ARROW_TYPES,
    BIT_STORED,
    DEFAULT_DTYPES,
    DTYPE_NAMES,
    FORMAT_NAME,
    FORMAT_VERSION,
    JSON_FIELDS,
    METADATA_KEY,
    TEXT_FIELDS,
)

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["to_hf_datasets"]


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
                name = DTYPE_NAMES.get(f.data_type)
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
        arrow = ARROW_TYPES[DEFAULT_DTYPES.get(field, torch.float32)]
        return {field: pa.nulls(n, type=pa.large_list(arrow))}, None
    dtype = present[0].dtype
    if any(v.dtype != dtype for v in present):
        other = next(v.dtype for v in present if v.dtype != dtype)
        raise TypeError(
            f"to_hf_datasets: {field} mixes dtypes {dtype} and {other} across experiences; a dataset column "
            f"holds one dtype: cast them to one (e.g. exp.{field} = exp.{field}.to({dtype}))"
        )
    name = DTYPE_NAMES.get(dtype)
    if name is None or (dtype not in ARROW_TYPES and name not in BIT_STORED):
        stored = sorted({*(DTYPE_NAMES[d] for d in ARROW_TYPES), *BIT_STORED})
        raise TypeError(
            f"to_hf_datasets: {field} has dtype {dtype}, which cannot be stored; use one of {stored}"
        )
    multi_dim = any(v.dim() != 1 for v in present)
    flat = torch.cat([v.reshape(-1) for v in present] if multi_dim else present).cpu()
    column = field
    if name in BIT_STORED:
        flat = flat.view(BIT_STORED[name][1])
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

    The layout is described in :mod:`trinity_core.hf`; :func:`~trinity_core.hf.from_hf_datasets`
    restores equal experiences (``experience_type``, EID component types, tensor dtypes and shapes,
    custom field dtypes included).
    Raises TypeError for a value that cannot be stored (naming the experience and field), and
    :class:`~trinity_core.extras.MissingExtraError` without ``datasets`` (``pip install 'trinity-core[hf]'``).
    """
    require_extra("hf", "to_hf_datasets")
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
    for name in TEXT_FIELDS:
        columns[name] = _strings([getattr(e, name) for e in exps])
    dtypes: dict[str, str] = {}
    for name in TENSOR_FIELDS:
        tensor_columns, dtype_name = _tensor_columns(name, [getattr(e, name) for e in exps])
        columns.update(tensor_columns)
        if dtype_name is not None:
            dtypes[name] = dtype_name
    for name in JSON_FIELDS:
        columns[name] = _json_column([getattr(e, name) for e in exps], name)
    columns["multi_modal_inputs"] = _json_column([e.multi_modal_inputs for e in exps], "multi_modal_inputs")
    columns["custom_fields"] = _custom_fields_column([e.custom_fields for e in exps])

    own = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "dtypes": dtypes}
    table = pa.table(columns).replace_schema_metadata({"huggingface": json.dumps({METADATA_KEY: own})})
    # A random fingerprint: datasets would otherwise hash (pickle) the whole table.
    return Dataset(InMemoryTable(table), fingerprint=uuid.uuid4().hex[:16])
