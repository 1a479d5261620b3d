"""Decoding is bounded by the payload's size: crafted headers cannot make the decoder amplify.

Python's allocations while decoding (``tracemalloc`` peak) stay under :data:`BYTES_PER_PAYLOAD_BYTE`
times the payload's size, whatever the header claims, and no header makes the decoder build a tensor
per item and field without paying for it in bytes. The bound is what ``docs/wire-format.md`` states.
"""

from __future__ import annotations

import inspect
import json
import math
import struct
import tracemalloc
from typing import Any

import pytest
import torch
from safetensors.torch import save

from trinity_core.codec import MAGIC, VERSION, ExperienceDecodeError, decode, deserialize_many, serialize_many
from trinity_core.experience import TENSOR_FIELDS, CustomField, Experience, experience_field_names

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

#: The documented bound of the decoder's memory, per payload byte.
BYTES_PER_PAYLOAD_BYTE = 256
N = 5_000


def frame(header: dict[str, Any], blob: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(21 + len(text)) % 8)
    return MAGIC + struct.pack("<BQQ", VERSION, len(text), len(blob)) + text + blob


def columns(n: int) -> dict[str, Any]:
    """The required columns of ``n`` experiences, each as cheap as the format allows (empty suffixes)."""
    return {
        "eid.batch": {"c": 0},
        "eid.task": {"c": 0},
        "eid.run": {"c": 0},
        "eid.step": {"c": 0},
        "eid.suffix": {"v": [""] * n},
        "prompt_length": {"c": 1},
        "experience_type": {"c": "single_turn"},
    }


def empty_tensor_fields(layout: str) -> tuple[dict[str, Any], bytes]:
    """Every tensor field present in every item with zero elements, as ``len``, ``lens`` or ``shapes``."""
    sizes = {"len": 0, "lens": [0] * N, "shapes": [[0, 3]] * N}
    specs = {field: {"present": None, "dtype": "float32", layout: sizes[layout]} for field in TENSOR_FIELDS}
    return specs, save({field: torch.zeros(0) for field in TENSOR_FIELDS})


def crafted(case: str) -> bytes:
    """One crafted payload of ``N`` experiences that cost the encoder as few bytes as it allows."""
    if case.startswith("empty tensors"):
        specs, blob = empty_tensor_fields(case.removeprefix("empty tensors (").removesuffix(")"))
        return frame({"n": N, "columns": columns(N), "tensors": specs}, blob)
    mm = {"mm": {"present": None, "keys": [[]] * N}} if case == "empty multi-modal dicts" else {}
    return frame({"n": N, "columns": columns(N), "tensors": {}, **mm}, save({}))


CASES = [
    "empty items",
    "empty tensors (len)",
    "empty tensors (lens)",
    "empty tensors (shapes)",
    "empty multi-modal dicts",
]


def peak_of(data: bytes) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        result: Any = deserialize_many(data)
    except ExperienceDecodeError as exc:
        result = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, result


@pytest.mark.parametrize("case", CASES)
def test_memory_is_bounded_by_the_payload_size(case: str) -> None:
    data = crafted(case)
    peak, result = peak_of(data)
    assert isinstance(result, list)
    assert len(result) == N
    assert peak <= BYTES_PER_PAYLOAD_BYTE * len(data), (case, peak / len(data))
    # Tensors cost memory tracemalloc does not see: items of zero elements share one per field.
    tensors = {id(getattr(exp, field)) for exp in result for field in TENSOR_FIELDS}
    assert len(tensors) <= len(TENSOR_FIELDS) + 1


def test_a_shared_custom_fields_column_cannot_expand_beyond_the_payload() -> None:
    k = 2_000
    header = {
        "n": N,
        "columns": {**columns(N), "custom_fields": {"c": [["a", "b", "float32"]] * k}},
        "tensors": {},
    }
    data = frame(header, save({}))
    assert N * k > 100 * len(data)  # what the decoder would build, against what it was given
    peak, result = peak_of(data)
    assert isinstance(result, ExperienceDecodeError)
    assert "shared entries exceed the payload" in str(result)
    assert peak <= BYTES_PER_PAYLOAD_BYTE * len(data)


def test_shared_custom_fields_decode_into_own_lists_of_shared_entries() -> None:
    fields = [CustomField("a", "b", torch.float32), CustomField("c", "d", torch.int64)]
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, custom_fields=fields) for _ in range(4)]
    out = deserialize_many(serialize_many(exps))
    assert [exp.custom_fields for exp in out] == [fields] * 4
    assert len({id(exp.custom_fields) for exp in out}) == 4  # one list each ...
    assert len({id(exp.custom_fields[0]) for exp in out}) == 1  # ... of the same frozen entries


def test_the_encoder_writes_many_shared_custom_fields_per_item() -> None:
    """A shared list that would expand beyond the payload is written out per item, and round-trips."""
    fields = [CustomField(f"s{i}", f"d{i}", torch.float32) for i in range(64)]
    exps = [Experience(tokens=[1, 2], prompt_length=1, custom_fields=fields) for _ in range(200)]
    data = serialize_many(exps)
    header_len = struct.unpack_from("<Q", data, 5)[0]
    assert "v" in json.loads(data[21 : 21 + header_len])["columns"]["custom_fields"]
    assert all(exp.custom_fields == fields for exp in deserialize_many(data))
    few = serialize_many(exps[:4])
    header_len = struct.unpack_from("<Q", few, 5)[0]
    assert "c" in json.loads(few[21 : 21 + header_len])["columns"]["custom_fields"]


def test_zero_length_items_share_one_empty_tensor_and_round_trip() -> None:
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1) for _ in range(3)]
    for exp, length in zip(exps, [0, 2, 0], strict=True):
        exp.advantages = torch.arange(length, dtype=torch.float32)
    out = deserialize_many(serialize_many(exps))
    assert [exp.advantages.tolist() for exp in out] == [[], [0.0, 1.0], []]
    assert out[0].advantages is out[2].advantages


def test_zero_element_items_of_one_shape_share_one_tensor_and_keep_their_shape() -> None:
    shapes = [(0, 3), (2, 2), (0, 3), (0, 5), ()]
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1) for _ in shapes]
    for exp, shape in zip(exps, shapes, strict=True):
        exp.returns = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    out = deserialize_many(serialize_many(exps))
    assert [tuple(exp.returns.shape) for exp in out] == shapes
    assert [exp.returns.tolist() for exp in out] == [[], [[0.0, 1.0], [2.0, 3.0]], [], [], 0.0]
    assert out[0].returns is out[2].returns
    assert out[3].returns is not out[0].returns


def test_the_decoder_stores_every_field_of_an_experience() -> None:
    """The decoder's per-item builder takes the fields by position: its parameters are the fields."""
    parameters = tuple(inspect.signature(decode._experience).parameters)
    assert parameters == experience_field_names()


def _shapes_payload(shapes: list[list[Any]], elements: int) -> bytes:
    """One ``logprobs`` column in the ``shapes`` layout over a blob of ``elements`` zeros."""
    n = len(shapes)
    spec = {"logprobs": {"present": None, "dtype": "float32", "shapes": shapes}}
    return frame({"n": n, "columns": columns(n), "tensors": spec}, save({"logprobs": torch.zeros(elements)}))


@pytest.mark.parametrize(
    ("shapes", "elements", "refusal"),
    [
        ([[1] * 64], 1, None),  # the most dimensions a shape may have
        ([[1] * 65], 1, "tensor field 'logprobs'.shapes: each shape must be a list of at most 64 ints"),
        ([["a"]], 1, "tensor field 'logprobs'.shapes must hold only ints"),
        ([[-1]], 1, "tensor field 'logprobs'.shapes: negative dimension"),
        # The largest int64 passes the range check, and then holds more elements than the blob.
        ([[2**63 - 1]], 1, "tensor field 'logprobs': shapes hold 9223372036854775807 elements, blob holds 1"),
        ([[2**63]], 1, "tensor field 'logprobs'.shapes: dimension beyond the int64 range"),
    ],
    ids=["64-dims", "65-dims", "not-an-int", "negative", "int64-max", "beyond-int64"],
)
def test_a_shape_is_checked_at_its_bounds_naming_the_field(
    shapes: list[list[Any]], elements: int, refusal: str | None
) -> None:
    data = _shapes_payload(shapes, elements)
    if refusal is None:
        assert deserialize_many(data)[0].logprobs.shape == (1,) * 64  # type: ignore[union-attr]
        return
    with pytest.raises(ExperienceDecodeError) as caught:
        deserialize_many(data)
    assert str(caught.value) == f"malformed experience payload: {refusal}"
