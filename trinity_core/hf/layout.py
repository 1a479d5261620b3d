"""The column layout shared by :mod:`trinity_core.hf.write` and :mod:`trinity_core.hf.read`.

Described in :mod:`trinity_core.hf`: the format name and version, the arrow type of each tensor dtype,
and which fields are stored as text, JSON or scalars.
"""

from __future__ import annotations

import pyarrow as pa
import torch

from trinity_core import jsonvalue

__all__ = [
    "ARROW_TYPES",
    "BIT_STORED",
    "DEFAULT_DTYPES",
    "DTYPE_NAMES",
    "EXPERIENCE_TYPES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "JSON_FIELDS",
    "METADATA_KEY",
    "SCALAR_COLUMNS",
    "TEXT_FIELDS",
    "TORCH_OF_ARROW",
]

FORMAT_NAME = "trinity_core.experiences"
FORMAT_VERSION = 1
METADATA_KEY = "trinity_core"

ARROW_TYPES: dict[torch.dtype, pa.DataType] = {
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
TORCH_OF_ARROW: dict[pa.DataType, torch.dtype] = {v: k for k, v in ARROW_TYPES.items()}
#: Dtypes without an arrow type, stored as raw bits in a column named ``<field>__<dtype name>``.
BIT_STORED: dict[str, tuple[torch.dtype, torch.dtype]] = {"bfloat16": (torch.bfloat16, torch.uint16)}
DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in jsonvalue.TORCH_DTYPES.items()}
#: Arrow type of an all-None tensor column (the type is irrelevant then; these match the constructor).
DEFAULT_DTYPES: dict[str, torch.dtype] = {
    "tokens": torch.int32,
    "chosen": torch.int32,
    "rejected": torch.int32,
    "action_mask": torch.bool,
}

JSON_FIELDS = ("info", "metrics", "messages", "tools", "chosen_messages", "rejected_messages")
TEXT_FIELDS = ("truncate_status", "prompt_text", "response_text")
SCALAR_COLUMNS = (
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
    *TEXT_FIELDS,
    *JSON_FIELDS,
    "multi_modal_inputs",
    "custom_fields",
)
EXPERIENCE_TYPES = ("single_turn", "multi_turn", "dpo")
