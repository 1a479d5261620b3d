"""Tests of the tagged JSON value encoding (trinity_core.jsonvalue)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.jsonvalue import (
    MAX_SHARED_HASH,
    TAG,
    TORCH_DTYPES,
    dumps,
    from_json_value,
    loads,
    to_json_value,
)

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only


def same(a: Any, b: Any) -> bool:
    """Exact equality: types, float bits (-0.0, NaN), tensor dtype/shape/values, numpy dtype/values."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if a != a:  # any NaN: JSON keeps no NaN sign or payload bits
            return b != b
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1), b.view(-1))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def roundtrip(value: Any) -> Any:
    """Through to_json_value, real JSON text, and back."""
    text = json.dumps(to_json_value(value, "v"))
    return from_json_value(json.loads(text))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -(2**63),
        2**63 - 1,
        2**63,
        -(2**200) - 7,
        2**16000 + 1,
        1.5,
        -0.0,
        float("inf"),
        float("-inf"),
        "text with \u00e9 and \ud800 lone surrogate",
        [1, [2, [3]]],
        (1, "a", (2.0,)),
        (),
        {"a": 1, "b": [1, 2]},
        {1: "int", 2.5: "float", False: "bool", None: "none", (1, 2): "tuple"},
        {TAG: "user data", "other": {TAG: "tuple", "v": []}},
        b"\x00\xffbytes",
        bytearray(b"ba"),
        {1, 2, 3},
        frozenset({"a"}),
    ],
    ids=lambda value: type(value).__name__,
)
def test_exact_round_trip_of_python_values(value: Any) -> None:
    assert same(roundtrip(value), value)


def test_nan_round_trips() -> None:
    out = roundtrip({"x": float("nan")})
    assert math.isnan(out["x"])


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES.values()))
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 4), (2, 3)])
def test_tensor_round_trip_every_dtype_and_shape(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    generator = torch.Generator().manual_seed(0)
    base = torch.randint(0, 2 if dtype == torch.bool else 100, shape, generator=generator)
    tensor = base.to(dtype)
    out = roundtrip(tensor)
    assert same(out, tensor)


def test_tensor_non_contiguous_and_grad() -> None:
    tensor = torch.arange(12.0, requires_grad=True).view(3, 4).t()
    out = roundtrip(tensor)
    assert same(out, tensor.detach().contiguous())
    assert not out.requires_grad


@pytest.mark.parametrize(
    "value",
    [
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.array([], dtype=np.float32),
        np.array(3.5, dtype=np.float64),
        np.array([True, False]),
        np.arange(4, dtype=">i4"),
        np.float32(1.25),
        np.int64(-3),
        np.bool_(True),
        np.complex64(1 + 2j),
    ],
)
def test_numpy_round_trip(value: Any) -> None:
    out = roundtrip(value)
    if isinstance(value, np.ndarray):
        assert isinstance(out, np.ndarray)
        assert out.dtype == value.dtype.newbyteorder("=")
        assert out.shape == value.shape
        np.testing.assert_array_equal(out, value)
    else:
        assert same(out, value)


def test_plain_values_are_returned_uncopied() -> None:
    value = {"a": 1, "b": "x", "c": [1.0, None, True]}
    assert to_json_value(value) is value
    assert from_json_value(value) is value


def test_dumps_loads() -> None:
    value = {"t": (1, 2), "k": {3: b"x"}}
    assert same(loads(dumps(value)), value)


@pytest.mark.parametrize(
    ("value", "path", "kind"),
    [
        ({"foo": [1, 2, object()]}, "experiences[3].info['foo'][2]", "object"),
        ([lambda: 0], "x[0]", "function"),
        ({1: {"a": complex(1, 2)}}, "x[1]['a']", "complex"),
        (torch.zeros(2).to_sparse(), "x", "sparse"),
    ],
)
def test_unsupported_types_name_path_and_type(value: Any, path: str, kind: str) -> None:
    where = path.split("[", 1)[0] if path.startswith("x") else "experiences[3].info"
    with pytest.raises(TypeError) as info:
        to_json_value(value, where)
    message = str(info.value)
    assert message.startswith(path)
    assert kind in message
    assert "supported:" in message


def tagged_tensor(**changes: Any) -> dict[str, Any]:
    base = to_json_value(torch.arange(4, dtype=torch.int32))
    base.update(changes)
    return dict(base)


@pytest.mark.parametrize(
    "bad",
    [
        {TAG: "nope"},
        {TAG: 3},
        {TAG: "tuple"},
        {TAG: "tuple", "v": [], "extra": 1},
        {TAG: "tuple", "v": "abc"},
        {TAG: "map", "v": [[1]]},
        {TAG: "map", "v": [[[1, 2], 3]]},
        {TAG: "set", "v": [[1]]},
        {TAG: "int", "hex": "12"},
        {TAG: "int", "hex": "0xzz"},
        {TAG: "bytes", "b64": "***"},
        {TAG: "bytes", "b64": 5},
        tagged_tensor(dtype="object"),
        tagged_tensor(dtype="Tensor"),
        tagged_tensor(shape=[5]),
        tagged_tensor(shape=[-4]),
        tagged_tensor(shape=[True, 4]),
        tagged_tensor(shape="4"),
        tagged_tensor(b64="AAAA"),
        {TAG: "tensor", "dtype": "bool", "shape": [1], "b64": "Ag=="},
        {TAG: "tensor", "dtype": "float32", "shape": [0, 2**62, 2**62], "b64": ""},
        {TAG: "ndarray", "dtype": "object", "shape": [1], "b64": "AA=="},
        {TAG: "ndarray", "dtype": "bool", "shape": [1], "b64": "Ag=="},
        {TAG: "npscalar", "dtype": "int32", "b64": "AA=="},
    ],
)
def test_strict_decoding_rejects_malformed_tags(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - any clear ValueError is the contract
        from_json_value({"wrapper": [bad]})


def test_decoding_rejects_non_json_input() -> None:
    with pytest.raises(ValueError, match="not JSON data"):
        from_json_value({"a": (1, 2)})


def test_deep_nesting_is_a_value_error() -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        loads("[" * 100_000 + "]" * 100_000)


#: CPython hashes an int to its value modulo this prime: its multiples all share the hash 0.
HASH_MODULUS = 2**61 - 1


def colliding(count: int) -> list[int]:
    """``count`` distinct ints with one hash value."""
    items = [HASH_MODULUS * i for i in range(1, count + 1)]
    assert {hash(item) for item in items} == {0}
    return items


@pytest.mark.parametrize("tag", ["set", "frozenset"])
def test_sets_of_too_many_items_of_one_hash_are_refused_both_ways(tag: str) -> None:
    kind = {"set": set, "frozenset": frozenset}[tag]
    fits = kind(colliding(MAX_SHARED_HASH))
    assert from_json_value(to_json_value(fits)) == fits
    too_many = colliding(MAX_SHARED_HASH + 1)
    with pytest.raises(ValueError, match=rf"tagged value '{tag}': 17 items share one hash value; at most 16"):
        from_json_value({TAG: tag, "v": too_many})
    with pytest.raises(TypeError, match=rf"value\['s'\]: a {tag} whose 17 items share one hash value"):
        to_json_value({"s": kind(too_many)})


def test_maps_with_too_many_keys_of_one_hash_are_refused_both_ways() -> None:
    fits = dict.fromkeys(colliding(MAX_SHARED_HASH), "x")
    assert from_json_value(to_json_value(fits)) == fits
    too_many = colliding(MAX_SHARED_HASH + 1)
    with pytest.raises(ValueError, match="tagged value 'map': 17 items share one hash value"):
        from_json_value({TAG: "map", "v": [[key, 0] for key in too_many]})
    with pytest.raises(TypeError, match="value: a dict with non-str keys whose 17 items share one hash"):
        to_json_value(dict.fromkeys(too_many, 0))


def test_many_items_of_distinct_hashes_are_fine() -> None:
    value = {"s": set(range(10_000)), "m": {i: i for i in range(10_000)}}
    assert same(from_json_value(to_json_value(value)), value)


def test_malformed_map_pairs_are_a_value_error() -> None:
    for pairs in ([[1, 2], [3]], [[1, 2], 5], [[1, 2, 3]]):
        with pytest.raises(ValueError, match=r"'v' must be a list of \[key, value\] pairs"):
            from_json_value({TAG: "map", "v": pairs})


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
hashable = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4), st.sampled_from([TAG]))
values = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=4) | st.just(TAG), children, max_size=4),
        st.dictionaries(hashable, children, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(values)
def test_hypothesis_round_trip(value: Any) -> None:
    assert same(roundtrip(value), value)
