"""Tests of the pickle-free experience wire format (trinity_core.codec)."""

from __future__ import annotations

import gc
import json
import math
import os
import pickle
import struct
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import import_reference

from trinity_core.codec import (
    LEGACY_MAGIC,
    MAGIC,
    VERSION,
    ExperienceDecodeError,
    ExperienceEncodeError,
    deserialize_many,
    serialize_many,
)
from trinity_core.codec.columns import decode_blob_column
from trinity_core.codec.spec import Malformed
from trinity_core.experience import EID, CustomField, Experience, experience_field_names

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

MARKER = "TRINITY_CODEC_TEST_PWNED"


# --------------------------------------------------------------------------------------------- helpers


def same(a: Any, b: Any) -> bool:
    """Exact equality: types, float bits, tensor dtype/shape/values (NaN-aware), containers recursively."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if a != a:  # any NaN: JSON keeps no NaN sign or payload bits
            return b != b
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return a.contiguous().view(-1).view(torch.uint8).equal(b.contiguous().view(-1).view(torch.uint8))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, EID):
        return same(a.to_dict(), b.to_dict())
    return bool(a == b)


def assert_same_experience(got: Experience, want: Experience) -> None:
    assert type(got) is Experience
    for name in experience_field_names():
        assert same(getattr(got, name), getattr(want, name)), name


def roundtrip(experiences: list[Experience]) -> list[Experience]:
    out = deserialize_many(serialize_many(experiences))
    assert len(out) == len(experiences)
    for got, want in zip(out, experiences, strict=True):
        assert_same_experience(got, want)
    return out


def rich_experiences() -> list[Experience]:
    """Every field set somewhere, with several dtypes, shapes and kinds of experience."""
    generator = torch.Generator().manual_seed(1)
    custom = [
        CustomField("score", "scores", torch.float32),
        CustomField("flag", "flags", torch.bool),
        CustomField("level", "levels", torch.int64),
        CustomField("half", "halves", torch.bfloat16),
    ]
    single = Experience(
        eid=EID(batch=3, task="a/b", run=2, step=1),
        tokens=[5, 6, 7, 8, 9],
        prompt_length=2,
        logprobs=[-0.5, -1.0, -0.0],
        reward=1.0,
        advantages=torch.tensor([0.5, float("nan"), float("-inf")]),
        info={"score": 0.25, "nested": {"t": (1, 2), 3: [b"x", None]}, "$t": "user key", "big": 2**70},
        metrics={"m": 1.5},
        prompt_text="p",
        response_text="r",
        custom_fields=custom,
    )
    multi = Experience(
        eid=EID(batch="b", task=7),
        tokens=torch.arange(6, dtype=torch.int64),
        prompt_length=2,
        logprobs=torch.randn(4, generator=generator).to(torch.bfloat16),
        action_mask=[True, False, True, True],
        token_level_reward=torch.randn(4, generator=generator).to(torch.float16),
        returns=torch.randn(4, generator=generator, dtype=torch.float64),
        teacher_logprobs=torch.zeros(4),
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        tools=[{"name": "calc", "parameters": {"x": 1}}],
        multi_modal_inputs={
            "pixel_values": torch.randn(2, 3, generator=generator),
            "image_grid_thw": torch.tensor([[1, 2, 2]]),
            "empty": torch.zeros(0, 5),
        },
        truncate_status="response_truncated",
        reward=2,
        custom_fields=custom[:1],
    )
    dpo = Experience(
        tokens=[1, 2, 3],
        chosen=[4, 5],
        rejected=torch.tensor([6], dtype=torch.int16),
        chosen_messages=[{"role": "assistant", "content": "good"}],
        rejected_messages=[{"role": "assistant", "content": "bad"}],
        info={"score": np.float32(0.5), "array": np.arange(3)},
    )
    truncated = Experience(
        tokens=[1, 2],
        prompt_length=2,
        logprobs=torch.zeros(0),
        truncate_status="prompt_truncated",
    )
    none_tokens = Experience(tokens=None, chosen=[1], rejected=[2])
    scalar_tensor = Experience(tokens=[1, 2, 3], prompt_length=1)
    scalar_tensor.returns = torch.tensor(3.0)  # 0-d: stored with shapes
    return [single, multi, dpo, truncated, none_tokens, scalar_tensor]


# ------------------------------------------------------------------------------------------ round trips


def test_round_trip_of_every_field() -> None:
    experiences = rich_experiences()
    out = roundtrip(experiences)
    assert [e.experience_type for e in out] == [
        "single_turn",
        "multi_turn",
        "dpo",
        "single_turn",
        "dpo",
        "single_turn",
    ]


def test_empty_list() -> None:
    data = serialize_many([])
    assert data[:4] == MAGIC
    assert data[4] == VERSION
    assert deserialize_many(data) == []


def test_zero_length_tensors() -> None:
    exps = [
        Experience(
            tokens=torch.zeros(0, dtype=torch.int32),
            prompt_length=0,
            action_mask=torch.zeros(0, dtype=torch.bool),
        )
        for _ in range(3)
    ]
    roundtrip(exps)


def test_experience_type_survives_even_when_inconsistent() -> None:
    exp = Experience(tokens=[1, 2, 3], prompt_length=1)
    exp.experience_type = "multi_turn"  # the reference would re-derive it; we store it
    assert roundtrip([exp])[0].experience_type == "multi_turn"


def test_varying_lengths_and_partial_presence() -> None:
    exps = [Experience(tokens=list(range(2 + i)), prompt_length=1, reward=float(i)) for i in range(5)]
    exps[1].logprobs = torch.tensor([0.1])
    exps[3].logprobs = torch.tensor([0.2, 0.3, 0.4])
    out = roundtrip(exps)
    # Items are views of one flat tensor per field, not per-item copies.
    pointers = {e.tokens.untyped_storage().data_ptr() for e in out}
    assert len(pointers) == 1


def test_decoded_tensors_are_writable_and_independent_of_the_payload() -> None:
    data = serialize_many([Experience(tokens=[1, 2, 3], prompt_length=1)])
    out = deserialize_many(data)[0]
    out.tokens[0] = 42
    assert deserialize_many(data)[0].tokens[0] == 1


def test_decoded_items_own_their_mutable_defaults_and_tensor_slices() -> None:
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=[0.5, 0.25]) for _ in range(3)]
    out = deserialize_many(serialize_many(exps))
    for name in ("info", "metrics", "custom_fields"):
        assert len({id(getattr(e, name)) for e in out}) == 3, name
    out[0].info["k"] = 1
    out[0].custom_fields.append(CustomField("a", "b", torch.float32))
    assert out[1].info == {}
    assert out[1].custom_fields == []
    # Each item's tensor is its own slice: writing it (even under autograd) leaves the others alone.
    out[1].tokens.fill_(7)
    out[1].logprobs.mul_(torch.tensor(2.0, requires_grad=True))
    assert [e.tokens.tolist() for e in out] == [[1, 2, 3], [7, 7, 7], [1, 2, 3]]
    assert out[0].logprobs.tolist() == out[2].logprobs.tolist() == [0.5, 0.25]
    assert out[1].logprobs.requires_grad


def test_tensors_on_other_devices_and_with_grad_are_written() -> None:
    logprobs = torch.tensor([0.5, 0.25], requires_grad=True)
    exp = Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=logprobs)
    out = deserialize_many(serialize_many([exp]))[0]
    assert out.logprobs is not None
    assert not out.logprobs.requires_grad
    assert torch.equal(out.logprobs, logprobs.detach())


def test_single_item_serialize_and_deserialize() -> None:
    exp = rich_experiences()[1]
    assert_same_experience(Experience.deserialize(exp.serialize()), exp)
    exps = rich_experiences()
    for got, want in zip(Experience.deserialize_many(Experience.serialize_many(exps)), exps, strict=True):
        assert_same_experience(got, want)


def test_deserialize_of_two_items_raises() -> None:
    data = serialize_many(rich_experiences()[:2])
    with pytest.raises(ExperienceDecodeError, match="exactly 1"):
        Experience.deserialize(data)


def test_payload_is_columnar() -> None:
    exps = [Experience(tokens=[1, 2, 3, 4], prompt_length=2, reward=0.5) for _ in range(4)]
    data = serialize_many(exps)
    header_len = struct.unpack_from("<Q", data, 5)[0]
    header = json.loads(data[21 : 21 + header_len])
    assert header["tensors"]["tokens"] == {"present": None, "dtype": "int32", "len": 4}
    assert header["columns"]["reward"] == {"c": 0.5}
    assert "info" not in header["columns"]  # all default: omitted


# ----------------------------------------------------------------------------------------- hypothesis

info_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
        st.dictionaries(st.integers(), children, max_size=3),
    ),
    max_leaves=8,
)
float_dtypes = st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64])


@st.composite
def experiences(draw: st.DrawFn) -> Experience:
    kind = draw(st.sampled_from(["single_turn", "multi_turn", "dpo"]))
    prompt = draw(st.integers(1, 4))
    response = draw(st.integers(1, 5))
    tokens = draw(st.lists(st.integers(0, 1000), min_size=prompt + response, max_size=prompt + response))
    floats = st.lists(st.floats(width=32), min_size=response, max_size=response)
    kwargs: dict[str, Any] = {
        "eid": EID(
            batch=draw(st.integers(0, 9) | st.text(max_size=3)),
            task=draw(st.integers(0, 9) | st.text(max_size=3)),
            run=draw(st.integers(0, 3)),
            step=draw(st.integers(0, 3)),
        ),
        "tokens": tokens,
        "prompt_length": prompt,
        "reward": draw(st.none() | st.floats() | st.integers(-5, 5)),
        "info": draw(st.dictionaries(st.text(max_size=4), info_values, max_size=3)),
        "metrics": draw(st.dictionaries(st.text(max_size=4), st.floats(), max_size=2)),
        "prompt_text": draw(st.none() | st.text(max_size=5)),
        "truncate_status": draw(st.none() | st.sampled_from(["response_truncated"])),
    }
    if draw(st.booleans()):
        kwargs["logprobs"] = torch.tensor(draw(floats)).to(draw(float_dtypes))
    if draw(st.booleans()):
        kwargs["advantages"] = draw(floats)
    if kind == "multi_turn":
        kwargs["action_mask"] = draw(st.lists(st.booleans(), min_size=response, max_size=response))
        kwargs["messages"] = draw(
            st.lists(st.dictionaries(st.sampled_from(["role", "content"]), st.text(max_size=4)))
        )
    if kind == "dpo":
        kwargs["chosen"] = draw(st.lists(st.integers(0, 9), max_size=3))
        kwargs["rejected"] = draw(st.lists(st.integers(0, 9), max_size=3))
    if draw(st.booleans()):
        kwargs["custom_fields"] = [CustomField("a", "b", draw(st.sampled_from([torch.float32, torch.int64])))]
    return Experience(**kwargs)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(experiences(), max_size=5))
def test_hypothesis_round_trip(exps: list[Experience]) -> None:
    roundtrip(exps)


# ------------------------------------------------------------------------------------------ encoding errors


def test_unsupported_info_value_names_item_and_path() -> None:
    exps = [Experience(tokens=[1, 2], prompt_length=1), Experience(tokens=[1, 2], prompt_length=1)]
    exps[1].info = {"k": [1, object()]}
    with pytest.raises(ExperienceEncodeError, match=r"experiences\[1\]\.info\['k'\]\[1\].*object"):
        serialize_many(exps)


def test_non_tensor_in_tensor_field_names_item_and_field() -> None:
    exps = [Experience(tokens=[1, 2], prompt_length=1) for _ in range(3)]
    exps[2].logprobs = [0.5]  # type: ignore[assignment]
    with pytest.raises(ExperienceEncodeError, match=r"experiences\[2\]\.logprobs: must be a torch.Tensor"):
        serialize_many(exps)


def test_bad_scalar_and_custom_field_dtype() -> None:
    exp = Experience(tokens=[1, 2], prompt_length=1)
    exp.reward = "high"  # type: ignore[assignment]
    with pytest.raises(ExperienceEncodeError, match=r"experiences\[0\]\.reward"):
        serialize_many([exp])
    exp = Experience(tokens=[1, 2], prompt_length=1, custom_fields=[CustomField("a", "b", torch.complex128)])
    with pytest.raises(ExperienceEncodeError, match=r"custom_fields\[0\]"):
        serialize_many([exp])


def test_varying_float_rewards_travel_bit_exact_in_the_blob() -> None:
    rewards = [0.1, -0.0, float("nan"), float("inf"), 1e-300]
    exps = [Experience(tokens=[1, 2], prompt_length=1, reward=r) for r in rewards]
    payload = serialize_many(exps)
    header_len = struct.unpack_from("<Q", payload, 5)[0]
    assert json.loads(payload[21 : 21 + header_len])["columns"]["reward"] == {"f64": "column.reward"}
    back = [exp.reward for exp in deserialize_many(payload)]
    assert [struct.pack("<d", r) for r in back] == [struct.pack("<d", r) for r in rewards]


@pytest.mark.parametrize(
    "tensor", [torch.zeros(2, dtype=torch.float64), torch.zeros(3, dtype=torch.float32), torch.zeros(3, 1)]
)
def test_reward_tensor_of_the_wrong_dtype_or_shape_is_rejected(tensor: torch.Tensor) -> None:
    with pytest.raises(Malformed, match="must be float64 of shape"):
        decode_blob_column("reward", {"f64": "column.reward"}, 3, {"column.reward": tensor}, set())


def test_numpy_reward_is_accepted_as_float() -> None:
    exp = Experience(tokens=[1, 2], prompt_length=1, reward=np.float64(0.5))  # type: ignore[arg-type]
    assert deserialize_many(serialize_many([exp]))[0].reward == 0.5


# ------------------------------------------------------------------------------------------ decoding errors


def edit_header(data: bytes, change: Any) -> bytes:
    """Rewrite the JSON header with ``change(header)`` and fix the prefix's header length."""
    header_len, blob_len = struct.unpack_from("<QQ", data, 5)
    header = json.loads(data[21 : 21 + header_len])
    change(header)
    text = json.dumps(header).encode()
    return data[:5] + struct.pack("<QQ", len(text), blob_len) + text + data[21 + header_len :]


def sample_payload() -> bytes:
    exps = [Experience(tokens=list(range(3 + i)), prompt_length=1, reward=float(i)) for i in range(3)]
    exps[1].logprobs = torch.tensor([0.5, 0.25, 0.125])
    return serialize_many(exps)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h.update(n=4), "for 4 (experiences|items)"),
        (lambda h: h.update(n=-1), "'n' must be"),
        (lambda h: h.update(extra=1), "bad header keys"),
        # A tiny header cannot claim millions of items: the suffix column must list every one.
        (lambda h: h.update(n=2**24) or h["columns"].update({"eid.suffix": {"c": "s"}}), "unknown form"),
        (lambda h: h["columns"].pop("eid.suffix"), "required column"),
        (lambda h: h["columns"].update(eid_suffix={"c": "x"}), "unknown columns"),
        (lambda h: h["columns"].update(reward={"v": ["a", "b", "c"]}), "wrong type"),
        (lambda h: h["columns"].update(reward={"f64": "tokens"}), "the f64 form must name"),
        (lambda h: h["columns"].update(reward={"f64": "column.reward", "v": [1]}), "one key"),
        (lambda h: h["columns"].update(experience_type={"c": "rlhf"}), "unknown experience type"),
        (lambda h: h["tensors"]["tokens"].update(lens=[3, 4, 4]), "lengths sum"),
        (lambda h: h["tensors"]["tokens"].update(lens=[3, 4, -1, 6]), "3 items"),
        (lambda h: h["tensors"]["tokens"].update(dtype="int64"), "not a 1-D int64"),
        (lambda h: h["tensors"]["tokens"].update(dtype="object"), "not allowed"),
        (lambda h: h["tensors"]["logprobs"].update(present=[5]), "out of range"),
        (lambda h: h["tensors"]["logprobs"].update(present=[1, 1]), "strictly increasing"),
        (lambda h: h["tensors"].pop("logprobs"), "unexpected tensors"),
        (lambda h: h["tensors"].update(routed_experts={}), "unknown tensor fields"),
        (lambda h: h["columns"].update(info={"v": [{"$t": "pickle"}, {}, {}]}), "unknown tag"),
        (lambda h: h["columns"].update(custom_fields={"c": [["a", "b", "torch.float32"]]}), "not allowed"),
    ],
)
def test_structural_checks(change: Any, message: str) -> None:
    with pytest.raises(ExperienceDecodeError, match=message):
        deserialize_many(edit_header(sample_payload(), change))


def test_length_and_prefix_checks() -> None:
    data = sample_payload()
    with pytest.raises(ExperienceDecodeError, match="shorter than"):
        deserialize_many(data[:10])
    with pytest.raises(ExperienceDecodeError, match="need"):
        deserialize_many(data[:-1])
    with pytest.raises(ExperienceDecodeError, match="need"):
        deserialize_many(data + b"\0")
    with pytest.raises(ExperienceDecodeError, match="unsupported version"):
        deserialize_many(data[:4] + b"\x02" + data[5:])
    with pytest.raises(ExperienceDecodeError, match="exceeds the limit"):
        deserialize_many(data[:5] + struct.pack("<Q", 2**62) + data[13:])
    with pytest.raises(ExperienceDecodeError, match="bad magic"):
        deserialize_many(b"XXXX" + data[4:])
    with pytest.raises(ExperienceDecodeError, match="expected bytes"):
        deserialize_many("text")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ pickle safety


class Exploit:
    """Unpickling this sets an environment variable (stands in for arbitrary code execution)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"import os; os.environ[{MARKER!r}] = '1'",))


@pytest.fixture
def no_marker() -> Any:
    os.environ.pop(MARKER, None)
    yield
    assert MARKER not in os.environ, "a pickle payload executed code"


@pytest.mark.usefixtures("no_marker")
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_raw_pickle_never_runs(protocol: int) -> None:
    payload = pickle.dumps([Exploit()], protocol=protocol)
    with pytest.raises(ExperienceDecodeError) as info:
        deserialize_many(payload)
    if protocol >= 2:
        assert "allow_pickle=True" in str(info.value)


@pytest.mark.usefixtures("no_marker")
def test_trxp_header_with_malicious_pickle_never_runs() -> None:
    meta = pickle.dumps({"version": 1, "num_items": 1, "items": [Exploit()]})
    payload = LEGACY_MAGIC + struct.pack("<BQQ", 1, len(meta), 0) + meta
    with pytest.raises(ExperienceDecodeError, match=r"TRXP.*allow_pickle=True"):
        deserialize_many(payload)
    with pytest.raises(ExperienceDecodeError, match="TRXP"):
        Experience.deserialize(payload)


@pytest.mark.usefixtures("no_marker")
def test_our_magic_with_pickled_header_never_runs() -> None:
    meta = pickle.dumps(Exploit())
    payload = MAGIC + struct.pack("<BQQ", VERSION, len(meta), 0) + meta
    with pytest.raises(ExperienceDecodeError):
        deserialize_many(payload)


# ------------------------------------------------------------------------------ legacy (reference)


def reference_experiences(ref: Any) -> list[Any]:
    return [
        ref.Experience(
            eid=ref.EID(batch=1, task=2, run=3, step=0),
            tokens=torch.tensor([1, 2, 3, 4], dtype=torch.int32),
            prompt_length=2,
            logprobs=torch.tensor([-0.5, -0.25]),
            reward=1.0,
            info={"model_version": 3},
            custom_fields=[ref.CustomField("s", "d", torch.float32)],
        ),
        ref.Experience(
            tokens=torch.tensor([1, 2, 3], dtype=torch.int32),
            prompt_length=1,
            action_mask=torch.tensor([True, False]),
            messages=[{"role": "user", "content": "x"}],
            multi_modal_inputs={"pixels": torch.ones(2, 2)},
        ),
        ref.Experience(tokens=torch.tensor([1, 2]), chosen=torch.tensor([3]), rejected=torch.tensor([4])),
    ]


def check_converted(got: list[Experience], refs: list[Any], *, types: list[str]) -> None:
    assert len(got) == len(refs)
    for ours, theirs, kind in zip(got, refs, types, strict=True):
        assert type(ours) is Experience
        assert type(ours.eid) is EID
        assert ours.eid.to_dict() == theirs.eid.to_dict()
        assert ours.experience_type == kind
        for name in ("tokens", "logprobs", "action_mask", "chosen", "rejected"):
            assert same(getattr(ours, name), getattr(theirs, name)), name
        for name in ("reward", "info", "metrics", "prompt_length", "messages"):
            assert getattr(ours, name) == getattr(theirs, name), name
        assert [(c.source_field, c.destination_field, c.data_type) for c in ours.custom_fields] == [
            (c.source_field, c.destination_field, c.data_type) for c in theirs.custom_fields
        ]
        if theirs.multi_modal_inputs is not None:
            assert ours.multi_modal_inputs is not None
            assert same(ours.multi_modal_inputs, dict(theirs.multi_modal_inputs))


@pytest.mark.reference
def test_legacy_trxp_payload_needs_opt_in() -> None:
    ref = import_reference("trinity.common.experience")
    refs = reference_experiences(ref)
    payload = ref.Experience.serialize_many(refs)
    with pytest.raises(ExperienceDecodeError, match="allow_pickle=True"):
        deserialize_many(payload)
    got = deserialize_many(payload, allow_pickle=True)
    # The reference payload has no experience_type; like the reference we re-derive it (single -> multi).
    check_converted(got, refs, types=["multi_turn", "multi_turn", "dpo"])


@pytest.mark.reference
def test_legacy_raw_pickle_needs_opt_in() -> None:
    ref = import_reference("trinity.common.experience")
    refs = reference_experiences(ref)
    payload = pickle.dumps(refs)
    with pytest.raises(ExperienceDecodeError, match="raw pickle"):
        deserialize_many(payload)
    check_converted(
        deserialize_many(payload, allow_pickle=True), refs, types=["single_turn", "multi_turn", "dpo"]
    )
    single = deserialize_many(pickle.dumps(refs[0]), allow_pickle=True)
    check_converted(single, refs[:1], types=["single_turn"])


@pytest.mark.reference
def test_payload_not_larger_than_reference() -> None:
    ref = import_reference("trinity.common.experience")
    theirs = [
        ref.Experience(
            eid=ref.EID(batch=0, task=i // 4, run=i % 4),
            tokens=torch.arange(32, dtype=torch.int32),
            prompt_length=16,
            logprobs=torch.zeros(16),
            action_mask=torch.ones(16, dtype=torch.bool),
            reward=float(i % 2),
        )
        for i in range(64)
    ]
    ours = [
        Experience(
            eid=EID(**e.eid.to_dict()),
            tokens=e.tokens,
            prompt_length=16,
            logprobs=e.logprobs,
            action_mask=e.action_mask,
            reward=e.reward,
        )
        for e in theirs
    ]
    assert len(serialize_many(ours)) <= len(ref.Experience.serialize_many(theirs))


# ------------------------------------------------------------------------------- numeric columns in the blob


def header_of(payload: bytes) -> dict[str, Any]:
    """The JSON header of a payload."""
    header_len = struct.unpack_from("<Q", payload, 5)[0]
    header: dict[str, Any] = json.loads(payload[21 : 21 + header_len])
    return header


def test_varying_int_ids_and_prompt_lengths_travel_as_int64_in_the_blob() -> None:
    exps = [
        Experience(
            eid=EID(batch=7, task=i // 2, run=i % 2, step=-(2**63) if i == 5 else i, suffix=f"s{i}"),
            tokens=[1, 2, 3, 4, 5],
            prompt_length=1 + i % 3,
        )
        for i in range(6)
    ]
    exps[4].eid.step = 2**63 - 1  # both ends of the int64 range
    columns = header_of(serialize_many(exps))["columns"]
    assert columns["eid.batch"] == {"c": 7}
    for name in ("eid.task", "eid.run", "eid.step", "prompt_length"):
        assert columns[name] == {"i64": f"column.{name}"}
    assert columns["eid.suffix"] == {"v": [f"s{i}" for i in range(6)]}  # always a JSON list
    out = roundtrip(exps)
    assert [e.eid.step for e in out] == [0, 1, 2, 3, 2**63 - 1, -(2**63)]


def test_ids_beyond_int64_or_of_mixed_types_stay_in_the_json_header() -> None:
    exps = [
        Experience(eid=EID(batch=batch, task=task, run=run), tokens=[1, 2], prompt_length=1)
        for batch, task, run in [(2**63, 1, 0), (-1, "x", 0), (0, 2, 1)]
    ]
    columns = header_of(serialize_many(exps))["columns"]
    assert columns["eid.batch"] == {"v": [2**63, -1, 0]}
    assert columns["eid.task"] == {"v": [1, "x", 2]}
    assert columns["eid.run"] == {"i64": "column.eid.run"}
    roundtrip(exps)


id_values = st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**70), 2**70) | st.text(max_size=3)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.lists(st.tuples(id_values, st.integers(-(2**64), 2**64)), min_size=1, max_size=6))
def test_hypothesis_id_and_prompt_length_columns(rows: list[tuple[int | str, int]]) -> None:
    exps = []
    for task, length in rows:
        exp = Experience(eid=EID(task=task, run=length % 4), tokens=[1, 2], prompt_length=1)
        exp.prompt_length = length  # any int is written as it is, in or out of range
        exps.append(exp)
    columns = header_of(serialize_many(exps))["columns"]
    for name, values in (("eid.task", [t for t, _ in rows]), ("prompt_length", [n for _, n in rows])):
        all_ints = all(type(v) is int for v in values)
        if len(set(map(type, values))) == 1 and len(set(values)) == 1:
            assert columns[name] == {"c": values[0]}
        elif all_ints and all(-(2**63) <= v < 2**63 for v in values):
            assert columns[name] == {"i64": f"column.{name}"}
        else:
            assert columns[name] == {"v": values}
    roundtrip(exps)


def int_column_payload() -> bytes:
    return serialize_many([Experience(eid=EID(task=i), tokens=[1, 2], prompt_length=1) for i in range(3)])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h["columns"].update({"eid.task": {"i64": "column.eid.run"}}), "the i64 form must name"),
        (lambda h: h["columns"].update({"eid.task": {"i64": "column.reward"}}), "the i64 form must name"),
        (lambda h: h["columns"].update({"eid.task": {"f64": "column.eid.task"}}), "unknown form"),
        (lambda h: h["columns"].update({"eid.suffix": {"i64": "column.eid.task"}}), "unknown form"),
        (lambda h: h["columns"].update({"eid.task": {"c": 1}}), "unexpected tensors"),
        (lambda h: h["columns"].update(prompt_length={"i64": "column.prompt_length"}), "missing from"),
        (lambda h: h["columns"].update({"eid.task": {"i64": "column.eid.task", "v": [1, 2, 3]}}), "one key"),
    ],
)
def test_structural_checks_of_int_columns(change: Any, message: str) -> None:
    data = int_column_payload()
    assert header_of(data)["columns"]["eid.task"] == {"i64": "column.eid.task"}
    with pytest.raises(ExperienceDecodeError, match=message):
        deserialize_many(edit_header(data, change))


@pytest.mark.parametrize(
    "tensor",
    [
        torch.zeros(3, dtype=torch.int32),
        torch.zeros(3, dtype=torch.float64),
        torch.zeros(2, dtype=torch.int64),
    ],
)
def test_int_column_tensor_of_the_wrong_dtype_or_shape_is_rejected(tensor: torch.Tensor) -> None:
    with pytest.raises(Malformed, match=r"'eid.run': blob tensor must be int64 of shape \(3,\)"):
        decode_blob_column("eid.run", {"i64": "column.eid.run"}, 3, {"column.eid.run": tensor}, set())


# ------------------------------------------------------------------------------------ encoder robustness


def test_encoding_never_compares_field_values_with_eq(monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns are scanned by type and identity: ``==`` on a tensor or an array would be slow or raise."""

    def refuse(self: Any, other: Any) -> Any:
        raise AssertionError("Tensor.__eq__ called while encoding")

    exps = rich_experiences()
    monkeypatch.setattr(torch.Tensor, "__eq__", refuse)
    payload = serialize_many(exps)
    monkeypatch.undo()
    for got, want in zip(deserialize_many(payload), exps, strict=True):
        assert_same_experience(got, want)


def test_array_in_a_free_form_column_round_trips() -> None:
    exps = [Experience(tokens=[1, 2], prompt_length=1) for _ in range(2)]
    exps[0].messages = np.arange(3)  # type: ignore[assignment]
    out = roundtrip(exps)
    assert isinstance(out[0].messages, np.ndarray)
    assert out[1].messages is None


def test_wrong_eid_type_names_the_item() -> None:
    exps = [Experience(tokens=[1, 2], prompt_length=1) for _ in range(3)]
    exps[2].eid = {"batch": 1}  # type: ignore[assignment]
    with pytest.raises(ExperienceEncodeError, match=r"experiences\[2\]\.eid: must be an EID, got dict"):
        serialize_many(exps)


@pytest.mark.parametrize(
    ("middle", "layout"),
    [
        (torch.arange(3, dtype=torch.int32), "lens"),  # another length
        (torch.arange(8, dtype=torch.int32).view(2, 4), "shapes"),  # same numel, 2-D
        (torch.tensor(7, dtype=torch.int32), "shapes"),  # 0-d
        (torch.arange(8, dtype=torch.int32)[::2], "len"),  # the same shape, not contiguous
    ],
)
def test_a_field_is_measured_when_the_first_and_last_shapes_do_not_tell(
    middle: torch.Tensor, layout: str
) -> None:
    exps = [Experience(tokens=[1, 2, 3, 4, 5], prompt_length=1) for _ in range(4)]
    for exp in exps:
        exp.advantages = torch.arange(4, dtype=torch.int32)
    exps[2].advantages = middle
    payload = serialize_many(exps)
    assert layout in header_of(payload)["tensors"]["advantages"]
    for got, want in zip(deserialize_many(payload), exps, strict=True):
        assert_same_experience(got, want)


@pytest.mark.parametrize("enabled", [True, False])
def test_encoding_leaves_the_garbage_collector_alone(enabled: bool) -> None:
    bad = Experience(tokens=[1, 2], prompt_length=1)
    bad.reward = "high"  # type: ignore[assignment]
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        serialize_many(rich_experiences())
        assert gc.isenabled() is enabled
        with pytest.raises(ExperienceEncodeError):
            serialize_many([bad])
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
