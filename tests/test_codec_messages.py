"""What the encoder and the decoder refuse, each message exactly: the encoder names the item, the field and
the reason; the decoder the part of the header and what is wrong with it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from safetensors.torch import load, save

from trinity_core.codec import deserialize_many, serialize_many
from trinity_core.codec.header import frame, parse_header, split_payload
from trinity_core.codec.spec import TENSOR_DTYPES, ExperienceDecodeError, ExperienceEncodeError
from trinity_core.experience import Experience


def _with(field: str, value: Any) -> list[Experience]:
    """Two experiences; the second holds ``value`` in ``field`` (set past the constructor's checks)."""
    exps = [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, logprobs=torch.tensor([0.1, 0.2]))]
    exps.append(
        Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, logprobs=torch.tensor([0.1, 0.2]))
    )
    object.__setattr__(exps[1], field, value)
    return exps


ALLOWED = ", ".join(TENSOR_DTYPES)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("logprobs", [0.1, 0.2], "experiences[1].logprobs: must be a torch.Tensor or None, got list"),
        (
            "logprobs",
            torch.tensor([1.0, 2.0], dtype=torch.complex128),
            f"experiences[1].logprobs: dtype torch.complex128 is not one of {ALLOWED}",
        ),
        (
            "logprobs",
            torch.tensor([0.1, 0.2]).to_sparse(),
            "experiences[1].logprobs: must be a dense tensor, got layout torch.sparse_coo",
        ),
        ("multi_modal_inputs", "x", "experiences[1].multi_modal_inputs: must be a dict or None, got str"),
        (
            "multi_modal_inputs",
            {"pixel": [1]},
            "experiences[1].multi_modal_inputs['pixel']: must be a torch.Tensor or None, got list",
        ),
        (
            "multi_modal_inputs",
            {"pixel": torch.ones(2, dtype=torch.complex128)},
            f"experiences[1].multi_modal_inputs['pixel']: dtype torch.complex128 is not one of {ALLOWED}",
        ),
    ],
    ids=["list", "dtype", "sparse", "mm-not-a-dict", "mm-not-a-tensor", "mm-dtype"],
)
def test_a_value_the_format_cannot_write_is_refused_naming_item_field_and_reason(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ExperienceEncodeError) as caught:
        serialize_many(_with(field, value))
    assert str(caught.value) == message


def test_the_first_item_is_named_as_item_0() -> None:
    exps = _with("logprobs", torch.tensor([0.1, 0.2]))
    object.__setattr__(exps[0], "logprobs", "0.1")
    with pytest.raises(ExperienceEncodeError, match=r"^experiences\[0\]\.logprobs: .* got str$"):
        serialize_many(exps)


def _payload(exps: list[Experience]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    header, blob = split_payload(serialize_many(exps))
    return parse_header(header), load(blob)


def _refusal(header: dict[str, Any], blob: dict[str, torch.Tensor]) -> str:
    with pytest.raises(ExperienceDecodeError) as caught:
        deserialize_many(frame(header, save(blob)))
    prefix = "malformed experience payload: "
    assert str(caught.value).startswith(prefix)
    return str(caught.value)[len(prefix) :]


@pytest.mark.parametrize(
    ("mm", "refusal"),
    [
        ({"present": [0]}, "'mm' must have 'present' and 'keys'"),
        ({"present": "x", "keys": [["pixel"]]}, "mm.present must be a list"),
        ({"present": [0], "keys": "x"}, "mm.keys: needs one key list per item"),
        ({"present": [0], "keys": [[1]]}, "mm.keys: lists of str"),
        ({"present": [0], "keys": [["a", "a"]]}, "mm.keys: duplicate key"),
    ],
    ids=["keys-missing", "present-not-a-list", "keys-not-a-list", "key-not-a-str", "duplicate-key"],
)
def test_a_malformed_multi_modal_spec_is_refused_saying_what_is_wrong(
    mm: dict[str, Any], refusal: str
) -> None:
    exps = [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1) for _ in range(2)]
    object.__setattr__(exps[0], "multi_modal_inputs", {"pixel": torch.ones(2)})
    header, blob = _payload(exps)
    assert header["mm"] == {"present": [0], "keys": [["pixel"]]}
    assert _refusal({**header, "mm": mm}, blob) == refusal


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        (
            {"present": [], "dtype": "float32", "len": 1},
            "tensor field 'logprobs': no items, but the blob holds 2 elements",
        ),
        ({"present": None, "dtype": "float32", "lens": "x"}, "tensor field 'logprobs'.lens must be a list"),
        ({"present": "x", "dtype": "float32", "len": 1}, "tensor field 'logprobs'.present must be a list"),
        (
            {"present": None, "dtype": ["float32"], "len": 1},
            "tensor field 'logprobs': dtype ['float32'] is not allowed",
        ),
    ],
    ids=["no-items-but-elements", "lens-not-a-list", "present-not-a-list", "dtype-not-a-name"],
)
def test_a_malformed_tensor_field_is_refused_naming_it(spec: dict[str, Any], refusal: str) -> None:
    header, blob = _payload([Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1) for _ in range(2)])
    header = {**header, "tensors": {**header["tensors"], "logprobs": spec}}
    assert _refusal(header, {**blob, "logprobs": torch.zeros(2)}) == refusal


def test_a_multi_modal_key_that_is_not_a_str_is_refused_naming_the_item() -> None:
    exps = _with("multi_modal_inputs", {1: torch.ones(2)})
    with pytest.raises(ExperienceEncodeError) as caught:
        serialize_many(exps)
    assert str(caught.value) == "experiences[1].multi_modal_inputs: keys must be str, got 1"


@pytest.mark.parametrize(
    "dtypes",
    [(torch.complex128,) * 3, (torch.float32, torch.float16, torch.complex128)],
    ids=["one-dtype", "mixed-dtypes"],
)
def test_a_dtype_the_format_cannot_write_is_refused_alone_or_beside_others(
    dtypes: tuple[torch.dtype, ...],
) -> None:
    exps = [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1) for _ in dtypes]
    for e, dtype in zip(exps, dtypes, strict=True):
        object.__setattr__(e, "logprobs", torch.ones(2, dtype=dtype))
    index = dtypes.index(torch.complex128)
    with pytest.raises(
        ExperienceEncodeError, match=rf"^experiences\[{index}\]\.logprobs: dtype torch\.complex128"
    ):
        serialize_many(exps)


def test_a_field_that_no_item_holds_writes_no_spec_and_shapes_of_several_dims_are_listed() -> None:
    exps = [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1) for _ in range(2)]
    header, _ = _payload(exps)
    assert set(header["tensors"]) == {"tokens", "action_mask"}  # logprobs: None in every item
    for e in exps:
        object.__setattr__(e, "logprobs", torch.arange(6.0).reshape(2, 3))
    header, _ = _payload(exps)
    assert header["tensors"]["logprobs"] == {"present": None, "dtype": "float32", "shapes": [[2, 3], [2, 3]]}
    back = deserialize_many(serialize_many(exps))
    assert all(torch.equal(b.logprobs, torch.arange(6.0).reshape(2, 3)) for b in back)  # type: ignore[arg-type]


def test_a_field_spec_with_no_items_and_an_empty_blob_decodes_to_none() -> None:
    header, blob = _payload([Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1) for _ in range(2)])
    header = {
        **header,
        "tensors": {**header["tensors"], "logprobs": {"present": [], "dtype": "float32", "len": 1}},
    }
    back = deserialize_many(frame(header, save({**blob, "logprobs": torch.zeros(0)})))
    assert [b.logprobs for b in back] == [None, None]


def test_an_empty_shapes_list_of_no_items_decodes_to_none_and_one_item_has_its_length() -> None:
    header, blob = _payload([Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1) for _ in range(2)])
    spec = {"present": [], "dtype": "float32", "shapes": []}
    empty = save({**blob, "logprobs": torch.zeros(0)})
    back = deserialize_many(frame({**header, "tensors": {**header["tensors"], "logprobs": spec}}, empty))
    assert [b.logprobs for b in back] == [None, None]
    one = [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, logprobs=torch.tensor([0.5, 0.25]))]
    header, _ = _payload(one)
    assert header["tensors"]["logprobs"] == {"present": None, "dtype": "float32", "len": 2}
