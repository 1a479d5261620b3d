"""Decoding time grows linearly with the payload, and JSON nesting is bounded before anything recurses.

The slope test decodes each crafted worst case of ``benchmarks/codec_worst_cases.py`` at two sizes ten
times apart and compares the CPU time per byte: linear work gives a ratio near 1 (below, when fixed
costs weigh on the small payload), quadratic work a ratio near 10. CPU time of this process
(``time.process_time``) with the garbage collector paused by the test, the fastest of a few rounds: other
work on the machine does not count, so a loaded CI machine cannot fail it; the figures per byte are in
``docs/benchmarks.md`` (``bench_codec_worst.py``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from trinity_core.codec import (
    MAX_JSON_DEPTH,
    ExperienceDecodeError,
    ExperienceEncodeError,
    deserialize_many,
    serialize_many,
)
from trinity_core.codec.jsontext import json_depth
from trinity_core.experience import Experience

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from codec_worst_cases import CASES, frame, one_item

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

#: Bytes of the smaller payload of each case; the larger holds ten times as many items.
SMALL = 10_000
#: Largest accepted growth of the time per byte over a tenfold size (quadratic work gives about 10).
MAX_PER_BYTE_GROWTH = 2.0
ROUNDS = 5


def cpu_seconds(data: bytes) -> float:
    """CPU time of one decode (or refusal) of ``data``, the garbage collector paused."""
    gc.disable()
    try:
        start = time.process_time()
        with contextlib.suppress(ExperienceDecodeError):
            deserialize_many(data)
        return time.process_time() - start
    finally:
        gc.enable()


def items_for(case: str, size: int) -> int:
    """About as many items of ``case`` as fit in ``size`` bytes (payload sizes grow linearly)."""
    build = CASES[case]
    small, large = len(build(64)), len(build(128))
    return max(1, int(64 + 64 * (size - small) / (large - small)))


@pytest.mark.parametrize("case", list(CASES))
def test_decoding_time_per_byte_does_not_grow_with_the_payload(case: str) -> None:
    count = items_for(case, SMALL)
    small, large = CASES[case](count), CASES[case](10 * count)
    assert len(large) > 8 * len(small)
    fastest_small = fastest_large = float("inf")
    for round_ in range(ROUNDS):
        fastest_small = min(fastest_small, cpu_seconds(small))
        fastest_large = min(fastest_large, cpu_seconds(large))
        growth = (fastest_large / len(large)) / (max(fastest_small, 1e-6) / len(small))
        if round_ >= 1 and growth < MAX_PER_BYTE_GROWTH:
            break
    assert growth < MAX_PER_BYTE_GROWTH, (
        f"{case}: {1e6 * fastest_small / len(small):.3f} us/B at {len(small):,} B, "
        f"{1e6 * fastest_large / len(large):.3f} us/B at {len(large):,} B"
    )


# --------------------------------------------------------------------------------------- depth limit


def nested_info(depth: int) -> bytes:
    """One experience whose ``info`` nests ``depth`` levels: an object holding ``depth - 1`` arrays."""
    return frame(one_item(info='{"j":[{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}]}"), save({}))


def test_the_header_may_nest_exactly_max_json_depth_levels() -> None:
    # Above the info value: the header object, "columns", the "info" column and its "j" list.
    (exp,) = deserialize_many(nested_info(MAX_JSON_DEPTH - 4))
    arrays, value = 0, exp.info["a"]
    while isinstance(value, list):
        arrays, value = arrays + 1, value[0] if value else None
    assert 4 + 1 + arrays == MAX_JSON_DEPTH
    with pytest.raises(ExperienceDecodeError, match=rf"nests arrays and objects {MAX_JSON_DEPTH + 1} deep"):
        deserialize_many(nested_info(MAX_JSON_DEPTH - 3))


def test_deep_nesting_is_refused_by_the_limit_not_by_recursion() -> None:
    with pytest.raises(ExperienceDecodeError) as caught:
        deserialize_many(nested_info(200_000))
    message = str(caught.value)
    assert f"the JSON header nests arrays and objects {200_000 + 4} deep" in message
    assert f"the limit is MAX_JSON_DEPTH = {MAX_JSON_DEPTH}" in message
    assert "Recursion" not in message
    assert caught.value.__cause__ is None


def test_the_safetensors_header_has_the_same_limit() -> None:
    deep = ('{"__metadata__":' + "[" * 5_000 + "]" * 5_000 + "}").encode()
    deep += b" " * (-len(deep) % 8)
    data = frame({"n": 0, "columns": {}, "tensors": {}}, struct.pack("<Q", len(deep)) + deep)
    with pytest.raises(
        ExperienceDecodeError, match="the safetensors header nests arrays and objects 5001 deep"
    ):
        deserialize_many(data)


def test_brackets_inside_strings_do_not_count() -> None:
    text = "[{" * 10_000 + '\\"\\\\' + "x"
    exp = Experience(tokens=[1, 2, 3], prompt_length=1, response_text=text, info={"k": text})
    (out,) = deserialize_many(serialize_many([exp]))
    assert out.response_text == text
    assert out.info == {"k": text}


def test_a_header_that_is_not_utf8_is_refused() -> None:
    data = frame(one_item(response_text='{"c":"@"}'), save({})).replace(b"@", b"\xff")
    with pytest.raises(ExperienceDecodeError, match="the JSON header is not UTF-8 text"):
        deserialize_many(data)


def nested(depth: int) -> Any:
    """A list nested ``depth`` deep (``[[...[1]...]]``)."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_the_encoder_refuses_what_the_decoder_would_refuse() -> None:
    # info is a dict (one level) holding the lists: the value's depth is depth + 1
    limit = MAX_JSON_DEPTH - 4
    fits = Experience(tokens=[1, 2, 3], prompt_length=1, info={"a": nested(limit - 1)})
    (out,) = deserialize_many(serialize_many([fits]))
    assert out.info == fits.info
    too_deep = Experience(tokens=[1, 2, 3], prompt_length=1, metrics={"a": nested(limit)})
    with pytest.raises(
        ExperienceEncodeError, match=rf"experiences\[1\]\.metrics: nests .* {limit + 1} levels"
    ):
        serialize_many([fits, too_deep])
    # Tags count: a tuple is written as {"$t": "tuple", "v": [...]}, two levels per tuple.
    tuples: Any = ()
    for _ in range(limit // 2):
        tuples = (tuples,)
    with pytest.raises(ExperienceEncodeError, match=r"experiences\[0\]\.info: nests"):
        serialize_many([Experience(tokens=[1, 2, 3], prompt_length=1, info={"t": tuples})])
    with pytest.raises(ExperienceEncodeError, match=r"experiences\[0\]\.info: value is nested too deeply"):
        serialize_many([Experience(tokens=[1, 2, 3], prompt_length=1, info={"a": nested(100_000)})])


def true_depth(value: Any) -> int:
    """Nesting of arrays and objects of a JSON value, by its definition."""
    if isinstance(value, list):
        return 1 + max(map(true_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(true_depth, value.values()), default=0)
    return 0


tricky_text = st.text(alphabet=st.sampled_from(list('[]{}"\\,:ab\u00e9\u4e2d')), max_size=12)
json_values = st.recursive(
    st.none() | st.integers() | tricky_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(tricky_text, children, max_size=3),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(json_values, st.booleans())
def test_json_depth_is_the_nesting_of_the_value(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    assert json_depth(text) == true_depth(value)


def test_a_repeated_key_is_named() -> None:
    keys = ",".join(f'"k{i}":0' for i in range(2_000))
    with pytest.raises(ExperienceDecodeError, match="duplicate key 'k1999' in a JSON object"):
        deserialize_many(frame(one_item(info='{"j":[{' + keys + ',"k1999":1}]}'), save({})))


def test_shape_dimensions_beyond_int64_are_refused() -> None:
    tensors = {"tokens": {"present": None, "dtype": "int32", "shapes": [[0, 10**4000]]}}
    header = {"n": 1, "columns": json.loads(one_item())["columns"], "tensors": tensors}
    data = frame(header, save({"tokens": torch.zeros(0, dtype=torch.int32)}))
    with pytest.raises(ExperienceDecodeError, match="dimension beyond the int64 range"):
        deserialize_many(data)
