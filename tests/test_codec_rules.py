"""Every validation rule of the wire format, each broken by a payload that breaks exactly that rule.

Each case starts from a valid payload (checked to decode) and changes one thing; the decoder must answer
with :class:`ExperienceDecodeError` and the message of that rule. Rules of the JSON columns and tensor
specs that ``tests/test_codec.py`` covers are not repeated here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
import torch
from safetensors.torch import save

from trinity_core.codec import MAGIC, VERSION, ExperienceDecodeError, deserialize_many, serialize_many
from trinity_core.experience import CustomField, Experience

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

Header = dict[str, Any]


def frame(header: Header | bytes, blob: bytes) -> bytes:
    """A payload of ``header`` (a dict, or raw JSON bytes) and ``blob``, padded as the writer pads."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-(21 + len(text)) % 8)
    return MAGIC + struct.pack("<BQQ", VERSION, len(text), len(blob)) + text + blob


def parts(payload: bytes) -> tuple[Header, bytes]:
    header_len = struct.unpack_from("<Q", payload, 5)[0]
    return json.loads(payload[21 : 21 + header_len]), payload[21 + header_len :]


def safetensors_blob(entries: dict[str, Any], data: bytes) -> bytes:
    """A safetensors blob written by hand: ``entries`` as its JSON header, then ``data``."""
    text = json.dumps(entries).encode()
    return struct.pack("<Q", len(text)) + text + data


def base() -> bytes:
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, reward=0.5) for _ in range(2)]
    exps[0].multi_modal_inputs = {"px": torch.ones(2, dtype=torch.bool)}
    exps[1].custom_fields = [CustomField("a", "b", torch.float32)]
    return serialize_many(exps)


def edit(change: Callable[[Header], Any]) -> bytes:
    header, blob = parts(base())
    change(header)
    return frame(header, blob)


def test_the_base_payload_decodes() -> None:
    assert len(deserialize_many(base())) == 2


def misaligned() -> bytes:
    """An int32 tensor at byte 1 of the data: valid in every other respect (it would decode)."""
    header = {
        "n": 1,
        "columns": {
            "eid.batch": {"c": 0},
            "eid.task": {"c": 0},
            "eid.run": {"c": 0},
            "eid.step": {"c": 0},
            "eid.suffix": {"v": ["s"]},
            "prompt_length": {"c": 1},
            "experience_type": {"c": "single_turn"},
        },
        "tensors": {"tokens": {"present": None, "dtype": "int32", "len": 1}},
        "mm": {"present": None, "keys": [["px"]]},
    }
    entries = {
        "mm.0.0": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "tokens": {"dtype": "I32", "shape": [1], "data_offsets": [1, 5]},
    }
    return frame(header, safetensors_blob(entries, b"\x07" + struct.pack("<i", 42)))


def test_a_misaligned_tensor_is_refused() -> None:
    with pytest.raises(ExperienceDecodeError, match="not aligned to its element size"):
        deserialize_many(misaligned())


def test_the_same_tensors_aligned_decode() -> None:
    """The control of the test above: the alignment is the only rule the misaligned payload breaks."""
    header, _blob = parts(misaligned())
    fixed = save(
        {"mm.0.0": torch.tensor([7], dtype=torch.uint8), "tokens": torch.tensor([42], dtype=torch.int32)}
    )
    (exp,) = deserialize_many(frame(header, fixed))
    assert exp.tokens.tolist() == [42]
    assert exp.multi_modal_inputs is not None
    assert exp.multi_modal_inputs["px"].tolist() == [7]


def test_the_header_length_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    data = base()
    header_len = struct.unpack_from("<Q", data, 5)[0]
    monkeypatch.setattr("trinity_core.codec.header.MAX_HEADER_BYTES", header_len - 1)
    with pytest.raises(ExperienceDecodeError, match=f"header length {header_len} exceeds the limit"):
        deserialize_many(data)
    monkeypatch.setattr("trinity_core.codec.header.MAX_HEADER_BYTES", header_len)
    assert len(deserialize_many(data)) == 2


def test_the_item_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trinity_core.codec.header.MAX_ITEMS", 1)
    with pytest.raises(ExperienceDecodeError, match=r"'n' must be an int in 0\.\.1"):
        deserialize_many(base())


def test_duplicate_keys_in_the_header_are_refused() -> None:
    header, blob = parts(base())
    text = json.dumps(header).encode()
    twice = text.replace(
        b'"experience_type": {"c": "single_turn"}',
        b'"experience_type": {"c": "single_turn"}, "experience_type": {"c": "dpo"}',
    )
    assert twice != text
    with pytest.raises(ExperienceDecodeError, match="duplicate key 'experience_type'"):
        deserialize_many(frame(twice, blob))
    nested = text.replace(b'"dtype": "int32"', b'"dtype": "int32", "dtype": "int32"')
    with pytest.raises(ExperienceDecodeError, match="duplicate key 'dtype'"):
        deserialize_many(frame(nested, blob))


def blob_edit(
    entries_change: Callable[[dict[str, Any]], Any] | None = None,
    data_change: Callable[[bytes], bytes] | None = None,
) -> bytes:
    """The base payload with its safetensors header and data edited (and written back by hand)."""
    header, blob = parts(base())
    length = struct.unpack_from("<Q", blob)[0]
    entries = json.loads(blob[8 : 8 + length])
    data = blob[8 + length :]
    if entries_change is not None:
        entries_change(entries)
    if data_change is not None:
        data = data_change(data)
    return frame(header, safetensors_blob(entries, data))


def first_entry(entries: dict[str, Any]) -> dict[str, Any]:
    return entries[next(name for name in entries if name != "__metadata__")]


CASES: list[tuple[str, Callable[[], bytes], str]] = [
    ("header is not JSON", lambda: frame(b"{not json", parts(base())[1]), "JSONDecodeError"),
    ("header is not an object", lambda: frame(b"[1, 2]", parts(base())[1]), "header must be a JSON object"),
    ("header lacks 'tensors'", lambda: edit(lambda h: h.pop("tensors")), "bad header keys"),
    ("'n' is not an int", lambda: edit(lambda h: h.update(n="2")), "'n' must be an int"),
    (
        "'columns' is not an object",
        lambda: edit(lambda h: h.update(columns=[])),
        "'columns' must be an object",
    ),
    (
        "'tensors' is not an object",
        lambda: edit(lambda h: h.update(tensors=[])),
        "'tensors' must be an object",
    ),
    (
        "a 'v' column is not a list",
        lambda: edit(lambda h: h["columns"].update({"eid.suffix": {"v": "ab"}})),
        "'v' must be a list",
    ),
    (
        "info holds a non-dict",
        lambda: edit(lambda h: h["columns"].update(info={"j": [1, {}]})),
        "must hold dicts",
    ),
    (
        "a custom-fields item is not a list",
        lambda: edit(lambda h: h["columns"].update(custom_fields={"v": [[], "x"]})),
        "each item must be a list",
    ),
    (
        "a custom-fields entry is not a triple",
        lambda: edit(lambda h: h["columns"].update(custom_fields={"c": [["a", "b"]]})),
        "entries must be",
    ),
    (
        "a tensor spec is not an object",
        lambda: edit(lambda h: h["tensors"].update(tokens=[])),
        "spec must be an object",
    ),
    (
        "'present' is missing",
        lambda: edit(lambda h: h["tensors"]["tokens"].pop("present")),
        "'present' is missing",
    ),
    ("two layouts", lambda: edit(lambda h: h["tensors"]["tokens"].update(lens=[3, 3])), "unexpected keys"),
    (
        "unknown layout",
        lambda: edit(lambda h: h["tensors"]["tokens"].update(size=3) or h["tensors"]["tokens"].pop("len")),
        "unknown layout",
    ),
    (
        "negative 'len'",
        lambda: edit(lambda h: h["tensors"]["tokens"].update(len=-3)),
        "'len' must be a non-negative int",
    ),
    (
        "'len' does not match",
        lambda: edit(lambda h: h["tensors"]["tokens"].update(len=2)),
        "2 items of length 2 != 6",
    ),
    (
        "negative length in 'lens'",
        lambda: edit(
            lambda h: h["tensors"]["tokens"].pop("len") and h["tensors"]["tokens"].update(lens=[7, -1])
        ),
        "negative length",
    ),
    (
        "shapes: one per item",
        lambda: edit(
            lambda h: h["tensors"]["tokens"].pop("len") and h["tensors"]["tokens"].update(shapes=[[3]])
        ),
        "needs one shape per item",
    ),
    (
        "shapes: negative dimension",
        lambda: edit(
            lambda h: (
                h["tensors"]["tokens"].pop("len") and h["tensors"]["tokens"].update(shapes=[[3], [-1, -3]])
            )
        ),
        "negative dimension",
    ),
    (
        "shapes: too many dimensions",
        lambda: edit(
            lambda h: (
                h["tensors"]["tokens"].pop("len") and h["tensors"]["tokens"].update(shapes=[[3], [1] * 65])
            )
        ),
        "at most 64",
    ),
    (
        "shapes: wrong total",
        lambda: edit(
            lambda h: h["tensors"]["tokens"].pop("len") and h["tensors"]["tokens"].update(shapes=[[3], [2]])
        ),
        "shapes hold 5 elements",
    ),
    (
        "per_item with a dtype",
        lambda: edit(
            lambda h: h["tensors"].update(tokens={"present": None, "per_item": True, "dtype": "int32"})
        ),
        "unexpected keys",
    ),
    ("mm without 'keys'", lambda: edit(lambda h: h["mm"].pop("keys")), "'mm' must have 'present' and 'keys'"),
    ("mm keys: one list per item", lambda: edit(lambda h: h["mm"].update(keys=[])), "one key list per item"),
    ("mm keys: not str", lambda: edit(lambda h: h["mm"].update(keys=[[1]])), "lists of str"),
    ("mm keys: duplicate", lambda: edit(lambda h: h["mm"].update(keys=[["px", "px"]])), "duplicate key"),
    (
        "blob shorter than its length",
        lambda: frame(parts(base())[0], b"\x01\x00"),
        "shorter than its 8-byte length",
    ),
    (
        "blob header length too large",
        lambda: frame(parts(base())[0], struct.pack("<Q", 10**6) + b"{}"),
        "exceeds the blob",
    ),
    (
        "blob header not an object",
        lambda: frame(parts(base())[0], safetensors_blob([], b"")),
        "safetensors header must be a JSON object",
    ),  # type: ignore[arg-type]
    ("blob entry with an extra key", lambda: blob_edit(lambda e: first_entry(e).update(extra=1)), "bad keys"),
    (
        "blob dtype code not allowed",
        lambda: blob_edit(lambda e: first_entry(e).update(dtype="F8_E4M3")),
        "is not allowed",
    ),
    (
        "blob offsets not a pair",
        lambda: blob_edit(lambda e: first_entry(e).update(data_offsets=[0])),
        r"must be \[begin, end\]",
    ),
    (
        "blob data with a trailing byte",
        lambda: blob_edit(data_change=lambda d: d + b"\0"),
        "safetensors blob: .*not fully covered",
    ),
    ("blob data one byte short", lambda: blob_edit(data_change=lambda d: d[:-1]), "safetensors blob: "),
    (
        "bool bytes other than 0 and 1",
        lambda: blob_edit(data_change=lambda d: d[:-2] + b"\x02" + d[-1:]),
        "bool bytes must be 0 or 1",
    ),
]


@pytest.mark.parametrize(("build", "message"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_rule(build: Callable[[], bytes], message: str) -> None:
    with pytest.raises(ExperienceDecodeError, match=message):
        deserialize_many(build())
