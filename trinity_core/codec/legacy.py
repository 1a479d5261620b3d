"""Reading the reference implementation's payloads: unsafe, and only with ``allow_pickle=True``.

Two formats: ``b"TRXP"`` (pickled metadata and a safetensors blob) and a bare pickle of one reference
``Experience`` or a list of them. Unpickling runs code chosen by whoever wrote the payload, which is why
the decoder calls into this module only when the caller opted in.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import torch
from safetensors.torch import load as _st_load

from trinity_core.codec.spec import (
    DTYPE_NAMES,
    EXPERIENCE_TYPES,
    LEGACY_MAGIC,
    PREFIX,
    TENSOR_DTYPES,
    ExperienceDecodeError,
)
from trinity_core.experience import EID, TENSOR_FIELDS, CustomField, Experience, experience_field_names

__all__ = ["legacy_hint", "read_legacy"]


def legacy_hint(data: bytes) -> str | None:
    """What a payload that is not ours looks like, when it looks like a legacy one."""
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
        resolved = dtype if isinstance(dtype, torch.dtype) and dtype in DTYPE_NAMES else _legacy_dtype(dtype)
        out.append(CustomField(source, destination, resolved))
    return out


def _warn_routed(index: int) -> None:
    warnings.warn(
        f"legacy experience {index}: 'routed_experts' is not a trinity-core field and was dropped",
        stacklevel=4,
    )


def _read_trxp(data: bytes) -> list[Experience]:
    if len(data) < PREFIX.size:
        raise ExperienceDecodeError("legacy TRXP payload is truncated")
    _, version, meta_len, tensor_len = PREFIX.unpack_from(data)
    if version != 1 or PREFIX.size + meta_len + tensor_len != len(data):
        raise ExperienceDecodeError(f"legacy TRXP payload: bad version {version} or lengths")
    meta = pickle.loads(data[PREFIX.size : PREFIX.size + meta_len])  # unsafe, explicit opt-in
    tensors = _st_load(data[PREFIX.size + meta_len :])
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
    if fields["experience_type"] not in EXPERIENCE_TYPES:
        fields["experience_type"] = "multi_turn" if fields["action_mask"] is not None else "single_turn"
    if attrs.get("routed_experts") is not None:
        _warn_routed(index)
    return Experience._restore(fields)


def read_legacy(data: bytes) -> list[Experience]:
    """Experiences from a legacy payload (``b"TRXP"`` or a bare pickle). Unsafe: it unpickles."""
    if data[:4] == LEGACY_MAGIC:
        return _read_trxp(data)
    obj = pickle.loads(data)  # unsafe, explicit opt-in
    items = obj if isinstance(obj, list) else [obj]
    return [_from_legacy_object(item, index) for index, item in enumerate(items)]
