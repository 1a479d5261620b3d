"""Crafted worst-case payloads for the experience decoder, each built to a requested size in bytes.

Every case stresses one path of :func:`trinity_core.codec.deserialize_many` with as many items as its
bytes allow: many keys in one JSON object (and the same object with its last key repeated), the same in
the safetensors ``__metadata__``, deep nesting, many tiny tensors, many zero-element ``shapes`` items,
many custom fields, one long string full of escapes, and set items whose hashes all collide. Shared by
``bench_codec_worst.py`` (seconds per byte) and ``tests/test_codec_linear.py`` (the slope).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from safetensors.torch import save

MAGIC = b"TRXC"
VERSION = 1


def frame(header: str | dict[str, Any], blob: bytes) -> bytes:
    """A payload of a JSON header (text, possibly invalid on purpose, or a dict) and a blob."""
    text = (header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))).encode()
    text += b" " * (-(21 + len(text)) % 8)
    return MAGIC + struct.pack("<BQQ", VERSION, len(text), len(blob)) + text + blob


def required_columns(n: int) -> dict[str, Any]:
    """The required columns of ``n`` experiences, as cheap as the format allows (empty suffixes)."""
    return {
        "eid.batch": {"c": 0},
        "eid.task": {"c": 0},
        "eid.run": {"c": 0},
        "eid.step": {"c": 0},
        "eid.suffix": {"v": [""] * n},
        "prompt_length": {"c": 0},
        "experience_type": {"c": "single_turn"},
    }


def one_item(**columns: Any) -> str:
    """The header text of one experience with extra ``columns`` (JSON text each, spliced in verbatim)."""
    header = {"n": 1, "columns": {**required_columns(1), **{k: f"@{k}@" for k in columns}}, "tensors": {}}
    text = json.dumps(header, separators=(",", ":"))
    for name, value in columns.items():
        text = text.replace(f'"@{name}@"', value)
    return text


def _keys(count: int) -> str:
    return ",".join(f'"k{i}":0' for i in range(count))


def many_keys(count: int) -> bytes:
    """One ``info`` object of ``count`` distinct keys (valid)."""
    return frame(one_item(info='{"j":[{' + _keys(count) + "}]}"), save({}))


def duplicate_last_key(count: int) -> bytes:
    """One ``info`` object of ``count`` keys that repeats its last key (refused)."""
    text = _keys(count) + f',"k{count - 1}":1'
    return frame(one_item(info='{"j":[{' + text + "}]}"), save({}))


def _safetensors(header_text: str) -> bytes:
    raw = header_text.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def metadata_duplicate_last_key(count: int) -> bytes:
    """A safetensors ``__metadata__`` of ``count`` keys that repeats its last key (refused)."""
    entries = ",".join(f'"k{i}":""' for i in range(count)) + f',"k{count - 1}":""'
    blob = _safetensors('{"__metadata__":{' + entries + "}}")
    return frame({"n": 0, "columns": {}, "tensors": {}}, blob)


def deep_nesting(depth: int) -> bytes:
    """An ``info`` value nested ``depth`` arrays deep (refused beyond the depth limit)."""
    return frame(one_item(info='{"j":[{"a":' + "[" * depth + "]" * depth + "}]}"), save({}))


def nested_at_the_limit(count: int) -> bytes:
    """``count`` experiences whose ``info`` is nested as deep as the format allows (valid)."""
    from trinity_core.codec import MAX_JSON_DEPTH

    depth = MAX_JSON_DEPTH - 5  # header, columns, info, its list, the dict itself
    value = '{"a":' + "[" * depth + "]" * depth + "}"
    header = {"n": count, "columns": {**required_columns(count), "info": "@info@"}, "tensors": {}}
    text = json.dumps(header, separators=(",", ":"))
    return frame(text.replace('"@info@"', '{"j":[' + ",".join([value] * count) + "]}"), save({}))


def tiny_tensors_lens(count: int) -> bytes:
    """``count`` experiences with one token each, in the ``lens`` layout (valid)."""
    import torch

    tensors = {"tokens": {"present": None, "dtype": "int32", "lens": [1] * count}}
    blob = save({"tokens": torch.zeros(count, dtype=torch.int32)})
    return frame({"n": count, "columns": required_columns(count), "tensors": tensors}, blob)


def tiny_tensors_per_item(count: int) -> bytes:
    """``count`` experiences with a one-element tensor each, one blob tensor per item (valid)."""
    import torch

    tensors = {"tokens": {"present": None, "per_item": True}}
    blob = save({f"tokens.{i}": torch.zeros(1, dtype=torch.int32) for i in range(count)})
    return frame({"n": count, "columns": required_columns(count), "tensors": tensors}, blob)


def zero_element_shapes(count: int) -> bytes:
    """``count`` experiences whose tensor has shape ``[0]``, in the ``shapes`` layout (valid)."""
    import torch

    tensors = {"tokens": {"present": None, "dtype": "int32", "shapes": [[0]] * count}}
    blob = save({"tokens": torch.zeros(0, dtype=torch.int32)})
    return frame({"n": count, "columns": required_columns(count), "tensors": tensors}, blob)


def distinct_zero_element_shapes(count: int) -> bytes:
    """``count`` experiences whose tensors have zero elements and distinct shapes ``[0, i]`` (valid)."""
    import torch

    tensors = {"tokens": {"present": None, "dtype": "int32", "shapes": [[0, i] for i in range(count)]}}
    blob = save({"tokens": torch.zeros(0, dtype=torch.int32)})
    return frame({"n": count, "columns": required_columns(count), "tensors": tensors}, blob)


def scalar_tensors(count: int) -> bytes:
    """``count`` experiences with a one-byte 0-d tensor each, in the ``shapes`` layout (valid)."""
    import torch

    tensors = {"tokens": {"present": None, "dtype": "uint8", "shapes": [[]] * count}}
    blob = save({"tokens": torch.zeros(count, dtype=torch.uint8)})
    return frame({"n": count, "columns": required_columns(count), "tensors": tensors}, blob)


def many_tagged_values(count: int) -> bytes:
    """One ``info`` holding ``count`` small tagged values (empty bytes) in a list (valid)."""
    items = ",".join(['{"$t":"bytes","b64":""}'] * count)
    return frame(one_item(info='{"v":[{"a":[' + items + "]}]}"), save({}))


def many_custom_fields(count: int) -> bytes:
    """One experience with ``count`` custom fields (valid)."""
    entries = ",".join(['["a","b","float32"]'] * count)
    return frame(one_item(custom_fields='{"v":[[' + entries + "]]}"), save({}))


def long_escaped_string(count: int) -> bytes:
    """One response text of ``count`` escaped characters (valid)."""
    return frame(one_item(response_text='{"c":"' + '\\u00e9\\"[{' * (count // 4) + '"}'), save({}))


def colliding_set(count: int) -> bytes:
    """A tagged set of ``count`` distinct ints that all share one hash (refused)."""
    modulus = (1 << 61) - 1  # CPython hashes an int to its value modulo this prime
    items = ",".join(str(modulus * i) for i in range(1, count + 1))
    return frame(one_item(info='{"v":[{"s":{"$t":"set","v":[' + items + "]}}]}"), save({}))


def empty_items(count: int) -> bytes:
    """``count`` experiences that hold nothing but an empty suffix each (valid)."""
    return frame({"n": count, "columns": required_columns(count), "tensors": {}}, save({}))


#: Case name -> builder of a payload from an item count (keys, levels, tensors, ...).
CASES: dict[str, Callable[[int], bytes]] = {
    "empty items": empty_items,
    "many keys": many_keys,
    "duplicate last key": duplicate_last_key,
    "duplicate key in __metadata__": metadata_duplicate_last_key,
    "deep nesting": deep_nesting,
    "nested at the limit": nested_at_the_limit,
    "tiny tensors (lens)": tiny_tensors_lens,
    "tiny tensors (per item)": tiny_tensors_per_item,
    "zero-element shapes": zero_element_shapes,
    "zero-element shapes, all distinct": distinct_zero_element_shapes,
    "0-d tensors (shapes)": scalar_tensors,
    "many tagged values": many_tagged_values,
    "many custom fields": many_custom_fields,
    "long escaped string": long_escaped_string,
    "colliding set items": colliding_set,
}


def count_for(case: str, size: int) -> int:
    """The most items of ``case`` whose payload fits in ``size`` bytes (at least 1).

    Estimated from two small payloads (sizes grow linearly with the count), then found by bisection
    around the estimate.
    """
    build = CASES[case]
    small, large = len(build(64)), len(build(128))
    per_item = max((large - small) / 64, 1e-3)
    guess = max(1, int(64 + (size - small) / per_item))
    low, high = max(1, guess * 9 // 10), guess * 11 // 10 + 2
    while low > 1 and len(build(low)) > size:
        low //= 2
    while len(build(high)) <= size:
        high *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if len(build(middle)) <= size:
            low = middle
        else:
            high = middle
    return low


def payload(case: str, size: int) -> bytes:
    """The payload of ``case`` with the most items that fits in ``size`` bytes."""
    return CASES[case](count_for(case, size))
