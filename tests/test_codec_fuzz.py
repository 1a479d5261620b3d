"""Fuzzing the experience decoder: any input gives a list of experiences or ExperienceDecodeError.

Five tests of 2,100 generated payloads each (10,500 in all): bit flips, byte replacements, truncations,
insertions, prefix length edits and JSON header edits of small valid payloads, and random bytes.
Derandomized, so CI sees the same inputs on every run.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trinity_core.codec import MAGIC, VERSION, ExperienceDecodeError, deserialize_many, serialize_many
from trinity_core.experience import EID, CustomField, Experience

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

EXAMPLES = 2_100
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _payloads() -> list[bytes]:
    a = Experience(
        eid=EID(batch=1, task="t", run=2),
        tokens=[1, 2, 3, 4],
        prompt_length=2,
        logprobs=[-0.5, -0.25],
        reward=1.0,
        info={"k": (1, 2), 3: b"x"},
        custom_fields=[CustomField("k", "d", torch.float32)],
    )
    b = Experience(
        tokens=torch.tensor([5, 6, 7], dtype=torch.int64),
        prompt_length=1,
        action_mask=[True, False],
        messages=[{"role": "user", "content": "x"}],
        multi_modal_inputs={"px": torch.ones(1, 2)},
    )
    c = Experience(tokens=[1], chosen=[2, 3], rejected=[4])
    d = Experience(tokens=[1, 2, 3, 4, 5], prompt_length=3, reward=0.0)
    # Varying int ids, prompt lengths and float rewards: the numeric columns that live in the blob.
    numeric = [
        Experience(
            eid=EID(batch=i, task=2 * i, run=i, step=i), tokens=[1, 2, 3], prompt_length=1 + i, reward=i / 3
        )
        for i in range(2)
    ]
    return [
        serialize_many([a, b, c]),
        serialize_many([d, d]),
        serialize_many([c]),
        serialize_many([]),
        serialize_many(numeric),
    ]


PAYLOADS = _payloads()


def check(data: bytes) -> None:
    """The contract: a list of Experience, or ExperienceDecodeError; never another exception."""
    try:
        out = deserialize_many(data)
    except ExperienceDecodeError:
        return
    assert isinstance(out, list)
    assert all(type(item) is Experience for item in out)


payloads = st.sampled_from(PAYLOADS)


@FUZZ
@given(payloads, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1, max_size=4))
def test_bit_flips(data: bytes, flips: list[tuple[int, int]]) -> None:
    buffer = bytearray(data)
    for position, bit in flips:
        buffer[position % len(buffer)] ^= 1 << bit
    check(bytes(buffer))


@FUZZ
@given(
    payloads,
    st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=4)), min_size=1, max_size=3),
    st.sampled_from(["replace", "insert", "truncate", "delete"]),
)
def test_byte_edits(data: bytes, edits: list[tuple[int, bytes]], mode: str) -> None:
    buffer = bytearray(data)
    for position, chunk in edits:
        at = position % (len(buffer) + 1)
        if mode == "replace":
            buffer[at : at + len(chunk)] = chunk
        elif mode == "insert":
            buffer[at:at] = chunk
        elif mode == "truncate":
            del buffer[at:]
        else:
            del buffer[at : at + len(chunk)]
    check(bytes(buffer))


@FUZZ
@given(
    payloads,
    st.integers(-64, 64) | st.integers(0, 2**64 - 1),
    st.integers(-64, 64) | st.integers(0, 2**64 - 1),
    st.integers(0, 255),
)
def test_prefix_edits(data: bytes, header_delta: int, blob_delta: int, version: int) -> None:
    header_len, blob_len = struct.unpack_from("<QQ", data, 5)
    new_header = header_delta if header_delta > 64 else max(0, header_len + header_delta)
    new_blob = blob_delta if blob_delta > 64 else max(0, blob_len + blob_delta)
    prefix = MAGIC + struct.pack(
        "<BQQ", version if version % 4 else VERSION, new_header % 2**64, new_blob % 2**64
    )
    check(prefix + data[21:])


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 2**40)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(
        ["$t", "tensor", "map", "int32", "bool", "c", "v", "j", "len", "lens", "present", "i64", "f64"]
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) pair inside a JSON value, depth first."""
    out: list[tuple[Any, Any]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        out.append((node, key))
        out.extend(_slots(child))
    return out


@FUZZ
@given(
    payloads, st.lists(st.tuples(st.integers(0, 10**6), json_values, st.booleans()), min_size=1, max_size=3)
)
def test_json_header_edits(data: bytes, edits: list[tuple[int, Any, bool]]) -> None:
    header_len, blob_len = struct.unpack_from("<QQ", data, 5)
    header = json.loads(data[21 : 21 + header_len])
    for index, value, delete in edits:
        slots = _slots(header)
        if not slots:
            header = value
            continue
        container, key = slots[index % len(slots)]
        if delete and isinstance(container, dict):
            del container[key]
        else:
            container[key] = value
    text = json.dumps(header).encode()
    check(data[:5] + struct.pack("<QQ", len(text), blob_len) + text + data[21 + header_len :])


@FUZZ
@given(
    st.binary(max_size=96), st.sampled_from([b"", MAGIC, MAGIC + bytes([VERSION]), b"TRXP\x01", b"\x80\x04"])
)
def test_random_bytes(tail: bytes, head: bytes) -> None:
    check(head + tail)
