"""Tensor fields: one flat blob tensor per field over all experiences, cut back into per-item slices.

The spec of a field gives ``present`` (``null`` for every item, else the strictly increasing indices of
the items that have it), its ``dtype`` and one of ``len`` (all 1-D of one length), ``lens`` (1-D, one
length each) or ``shapes``; a field whose items' dtypes differ is stored per item instead
(``{"present": ..., "per_item": true}``, blob tensors ``"<field>.<index>"``). Multi-modal inputs are
always per item (``"mm.<index>.<position>"``, their keys in ``mm.keys``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from itertools import chain
from typing import Any

import torch
from torch import Tensor

from trinity_core.codec.blob import BlobEntry, blob_tensor
from trinity_core.codec.columns import Column, Same
from trinity_core.codec.spec import (
    DTYPE_NAMES,
    NONE,
    TENSOR_DTYPES,
    Malformed,
    encode_error,
    ints,
    require,
)

__all__ = ["decode_multi_modal", "decode_tensor_field", "multi_modal_spec", "tensor_field_spec"]

_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")
_LAYOUT = operator.attrgetter("layout")
_MAX_DIMS = 64
_INT64_MAX = 2**63 - 1


# ------------------------------------------------------------------------------------------- encoding


def _check_tensors(field: str, tensors: Sequence[Any], present: Sequence[int]) -> None:
    for index, value in zip(present, tensors, strict=True):
        if not isinstance(value, Tensor):
            raise encode_error(index, field, f"must be a torch.Tensor or None, got {type(value).__name__}")
        if value.dtype not in DTYPE_NAMES:
            raise encode_error(index, field, f"dtype {value.dtype} is not one of {', '.join(TENSOR_DTYPES)}")
        if value.layout != torch.strided:
            raise encode_error(index, field, f"must be a dense tensor, got layout {value.layout}")


def tensor_field_spec(
    field: str, values: Sequence[Any], blob: list[BlobEntry], *, measure: bool
) -> dict[str, Any] | None:
    """The header spec of tensor field ``field``; its blob entries are appended to ``blob``.

    Every value must be ``None`` or a tensor with an allowed dtype. Unless ``measure`` is set, a field
    whose first and last tensors are 1-D of the same non-zero length is assumed to have that length
    throughout: reading every shape costs a pass over all tensors, while stacking them into the blob
    verifies the assumption (:class:`~trinity_core.codec.blob.Ragged` when it is wrong, and the encoder
    starts over with ``measure=True``).
    """
    kinds = set(map(type, values))  # not values.count(None): that runs Tensor.__eq__ per item
    if kinds == {NONE} or not values:
        return None
    spec: dict[str, Any]
    present: Sequence[int]
    if NONE in kinds:
        present = [i for i, v in enumerate(values) if v is not None]
        tensors: Sequence[Any] = [values[i] for i in present]
        spec = {"present": present}
    else:
        present = range(len(values))
        tensors = values
        spec = {"present": None}
    kinds.discard(NONE)
    dtypes = set(map(_DTYPE, tensors)) if kinds == {Tensor} else set()
    layouts = set(map(_LAYOUT, tensors)) if kinds == {Tensor} else set()
    if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPE_NAMES or layouts != {torch.strided}:
        _check_tensors(field, tensors, present)
        dtypes = set(map(_DTYPE, tensors))
    if len(dtypes) != 1:
        # Mixed dtypes cannot share one flat tensor: store each item's tensor on its own.
        for index, tensor in zip(present, tensors, strict=True):
            blob.append(BlobEntry(f"{field}.{index}", tensor.dtype, list(tensor.shape), [tensor]))
        spec["per_item"] = True
        return spec
    (dtype,) = dtypes
    spec["dtype"] = DTYPE_NAMES[dtype]
    first = tensors[0].shape
    if not measure and len(tensors) > 1 and len(first) == 1 and first[0] and tensors[-1].shape == first:
        spec["len"] = first[0]
        blob.append(BlobEntry(field, dtype, [first[0] * len(tensors)], tensors, rows=len(tensors)))
        return spec
    shapes = list(map(_SHAPE, tensors))
    if len(shapes[0]) == 1 and shapes.count(shapes[0]) == len(shapes):  # the common case: one length
        spec["len"] = shapes[0][0]
        total = shapes[0][0] * len(shapes)
    elif set(map(len, shapes)) == {1}:
        lens = [shape[0] for shape in shapes]
        spec["lens"] = lens
        total = sum(lens)
    else:
        spec["shapes"] = list(map(list, shapes))
        total = sum(t.numel() for t in tensors)
    blob.append(BlobEntry(field, dtype, [total], tensors))
    return spec


def multi_modal_spec(values: Sequence[Any], blob: list[BlobEntry]) -> dict[str, Any] | None:
    """The header spec of ``multi_modal_inputs``; each input tensor is appended to ``blob``."""
    if set(map(type, values)) == {NONE}:
        return None
    present: list[int] = []
    keys: list[list[str]] = []
    for index, inputs in enumerate(values):
        if inputs is None:
            continue
        if not isinstance(inputs, dict):
            raise encode_error(
                index, "multi_modal_inputs", f"must be a dict or None, got {type(inputs).__name__}"
            )
        names = list(inputs)
        for position, name in enumerate(names):
            if type(name) is not str:
                raise encode_error(index, "multi_modal_inputs", f"keys must be str, got {name!r}")
            tensor = inputs[name]
            _check_tensors(f"multi_modal_inputs[{name!r}]", [tensor], [index])
            blob.append(BlobEntry(f"mm.{index}.{position}", tensor.dtype, list(tensor.shape), [tensor]))
        present.append(index)
        keys.append(names)
    return {"present": present, "keys": keys}


# ------------------------------------------------------------------------------------------- decoding


def _presence(spec: dict[str, Any], count: int, what: str) -> list[int] | None:
    require("present" in spec, f"{what}: 'present' is missing")
    present = spec["present"]
    if present is None:
        return None
    present = ints(present, f"{what}.present")
    if present:
        require(present[0] >= 0 and present[-1] < count, f"{what}.present: index out of range 0..{count - 1}")
        require(all(map(operator.lt, present, present[1:])), f"{what}.present: must be strictly increasing")
    return present


def _shapes(value: Any, rows: int, what: str) -> list[list[int]]:
    """``value`` checked to be ``rows`` shapes, each a list of at most 64 ints in ``0 .. 2**63 - 1``.

    One pass of builtins over the shapes and one over all their dimensions, no Python code per shape.
    """
    require(type(value) is list and len(value) == rows, f"{what}: needs one shape per item ({rows})")
    require(
        set(map(type, value)) <= {list} and max(map(len, value), default=0) <= _MAX_DIMS,
        f"{what}: each shape must be a list of at most {_MAX_DIMS} ints",
    )
    dims = ints(list(chain.from_iterable(value)), what)
    if dims:
        require(min(dims) >= 0, f"{what}: negative dimension")
        # A dimension torch cannot hold is refused before any product of dimensions is computed.
        require(max(dims) <= _INT64_MAX, f"{what}: dimension beyond the int64 range")
    return value  # type: ignore[no-any-return]


def _shaped(flat: Tensor, shapes: list[list[int]], what: str) -> list[Tensor]:
    """Cut ``flat`` into one tensor per shape (no copies); items of zero elements share one per shape.

    Like the empty tensor that zero-length items of ``len`` and ``lens`` share, a zero-element item costs
    no tensor of its own: a payload cannot make the decoder build a tensor from a few header bytes.
    """
    sizes = list(map(math.prod, shapes))
    total = flat.numel()
    require(sum(sizes) == total, f"{what}: shapes hold {sum(sizes)} elements, blob holds {total}")
    filled = iter(flat.unsafe_split_with_sizes([size for size in sizes if size]))
    empty: dict[tuple[int, ...], Tensor] = {}
    out = []
    for size, shape in zip(sizes, shapes, strict=True):
        if size:
            piece = next(filled)  # 1-D, of `size` elements
            out.append(piece if len(shape) == 1 else piece.view(shape))
            continue
        key = tuple(shape)
        if key not in empty:
            empty[key] = flat[:0].view(shape)
        out.append(empty[key])
    return out


def _split_flat(flat: Tensor, spec: dict[str, Any], kind: str, rows: int, what: str) -> Sequence[Tensor]:
    """Cut a field's flat tensor into per-item slices (no copies).

    ``unsafe_split`` makes the same disjoint slices as ``split`` without registering them as
    multi-output views of ``flat``, which nothing else ever sees: an in-place op on one item's tensor
    under autograd then behaves as on any tensor instead of raising. Items of zero elements share one
    empty tensor of the field (one per shape in the ``shapes`` layout), which holds nothing to write
    into, so a header cannot make the decoder build a tensor per item and field out of a few bytes.
    """
    total = flat.numel()
    if rows == 0:
        require(total == 0, f"{what}: no items, but the blob holds {total} elements")
        return []
    if kind == "len":
        length = spec["len"]
        require(type(length) is int and length >= 0, f"{what}: 'len' must be a non-negative int")
        require(length * rows == total, f"{what}: {rows} items of length {length} != {total} elements")
        return flat.unsafe_split(length) if length else [flat] * rows
    if kind == "lens":
        lens = ints(spec["lens"], f"{what}.lens")
        require(len(lens) == rows, f"{what}: {len(lens)} lengths for {rows} items")
        require(min(lens) >= 0, f"{what}: negative length")
        require(sum(lens) == total, f"{what}: lengths sum to {sum(lens)}, blob holds {total} elements")
        if 0 not in lens:
            return flat.unsafe_split_with_sizes(lens)
        filled = iter(flat.unsafe_split_with_sizes([length for length in lens if length]))
        empty = flat[:0]
        return [next(filled) if length else empty for length in lens]
    if kind == "shapes":
        return _shaped(flat, _shapes(spec["shapes"], rows, f"{what}.shapes"), what)
    raise Malformed(f"{what}: unknown layout {kind!r} (expected 'len', 'lens' or 'shapes')")


def decode_tensor_field(field: str, spec: Any, count: int, blob: dict[str, Tensor], used: set[str]) -> Column:
    """The per-item tensors of field ``field`` (``None`` where absent), checked against its spec."""
    what = f"tensor field {field!r}"
    require(type(spec) is dict, f"{what}: spec must be an object")
    present = _presence(spec, count, what)
    if spec.get("per_item") is True:
        require(spec.keys() == {"present", "per_item"}, f"{what}: unexpected keys {sorted(spec)}")
        indices = range(count) if present is None else present
        column: list[Any] = [None] * count
        for index in indices:
            column[index] = blob_tensor(blob, f"{field}.{index}", used)
        return column
    layout = spec.keys() - {"present", "dtype"}
    require("dtype" in spec and len(layout) == 1, f"{what}: unexpected keys {sorted(spec)}")
    dtype_name = spec["dtype"]
    dtype = TENSOR_DTYPES.get(dtype_name) if type(dtype_name) is str else None
    require(dtype is not None, f"{what}: dtype {dtype_name!r} is not allowed")
    flat = blob_tensor(blob, field, used)
    require(flat.dtype == dtype and flat.dim() == 1, f"{what}: blob tensor is not a 1-D {dtype_name} tensor")
    items = _split_flat(flat, spec, next(iter(layout)), count if present is None else len(present), what)
    if present is None:
        return list(items)
    column = [None] * count
    for index, item in zip(present, items, strict=True):
        column[index] = item
    return column


def decode_multi_modal(spec: Any, count: int, blob: dict[str, Tensor], used: set[str]) -> Column:
    """The per-item ``multi_modal_inputs`` dicts (``None`` where absent)."""
    if spec is None:
        return Same(None)
    require(type(spec) is dict and spec.keys() == {"present", "keys"}, "'mm' must have 'present' and 'keys'")
    present = _presence(spec, count, "mm")
    indices = list(range(count)) if present is None else present
    keys = spec["keys"]
    require(type(keys) is list and len(keys) == len(indices), "mm.keys: needs one key list per item")
    column: list[Any] = [None] * count
    for index, names in zip(indices, keys, strict=True):
        require(type(names) is list and all(type(name) is str for name in names), "mm.keys: lists of str")
        require(len(set(names)) == len(names), "mm.keys: duplicate key")
        column[index] = {
            name: blob_tensor(blob, f"mm.{index}.{position}", used) for position, name in enumerate(names)
        }
    return column
