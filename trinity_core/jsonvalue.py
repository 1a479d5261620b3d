"""A tagged JSON encoding for free-form values, with an exact round trip and no code execution.

Free-form fields of an experience (``info``, ``metrics``, ``messages``, ``tools``, ...) may hold more
than JSON can say: tuples, dicts with non-string keys, bytes, big integers, tensors, numpy arrays.
:func:`to_json_value` turns such a value into JSON-native data (dicts with string keys, lists, strings,
ints, floats including NaN and infinities, bools and ``None``) and :func:`from_json_value` restores it
exactly. Everything JSON cannot say is written as a *tagged* dict, a dict with the reserved key
``"$t"`` naming the type:

=============  ====================================================================  ===================
tag            fields                                                                 restores
=============  ====================================================================  ===================
``tuple``      ``v``: list of encoded items                                           ``tuple``
``set``        ``v``: list of encoded items                                           ``set``
``frozenset``  ``v``: list of encoded items                                           ``frozenset``
``map``        ``v``: list of ``[key, value]`` pairs, both encoded                    ``dict``
``int``        ``hex``: the integer in base 16 (``"-0x..."``), for ints outside int64 ``int``
``bytes``      ``b64``: base64 text                                                   ``bytes``
``bytearray``  ``b64``: base64 text                                                   ``bytearray``
``tensor``     ``dtype``, ``shape``, ``b64`` (raw little-endian element bytes)        ``torch.Tensor``
``ndarray``    ``dtype``, ``shape``, ``b64``                                          ``numpy.ndarray``
``npscalar``   ``dtype``, ``b64``                                                     numpy scalar
=============  ====================================================================  ===================

A dict whose keys are all strings, none of them ``"$t"``, is written as itself; any other dict (a key
that is not a string, or a user key that happens to be ``"$t"``) becomes a ``map``, so user data can never
be mistaken for a tag. Tensor and array dtypes come from an allow-list (:data:`TORCH_DTYPES`,
:data:`NUMPY_DTYPES`); decoding looks names up in these tables only, never with ``getattr``, ``eval`` or
pickle, and checks every tag's fields strictly: a bad tag, an unknown dtype or a byte count that does not
match the shape raises :class:`ValueError`. No more than :data:`MAX_SHARED_HASH` items of one set or map
may share a hash value, both ways, so decoding stays linear in the size of the data.

Values whose every part is already JSON-native (the common case: a dict of strings to strings, numbers,
bools and ``None``) are recognised by a quick scan and returned as they are, so encoding them costs little
more than ``json.dumps``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections import Counter
from typing import Any

import numpy as np
import torch

__all__ = [
    "MAX_SHARED_HASH",
    "NUMPY_DTYPES",
    "TAG",
    "TORCH_DTYPES",
    "dumps",
    "from_json_value",
    "loads",
    "to_json_value",
]

#: The reserved key that marks a tagged dict.
TAG = "$t"

#: Tensor dtypes that may be written, by the name used on the wire (``str(dtype)`` without ``torch.``).
TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
_TORCH_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in TORCH_DTYPES.items()}

#: Numpy dtypes that may be written (arrays and scalars), by name; stored little-endian.
NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
#: Tensors and arrays may have at most this many dimensions (numpy's own limit is 64).
MAX_NDIM = 64

#: Most items of one set, frozenset or map that may share a hash value. A set or dict compares each new
#: item with every earlier one of the same hash, so many distinct items of one hash take quadratic time;
#: ints and floats can be crafted to collide (CPython hashes an int to its value modulo ``2**61 - 1``).
MAX_SHARED_HASH = 16

_SUPPORTED = (
    "None, bool, int, float, str, list, tuple, set, frozenset, dict (any keys of supported types), bytes, "
    "bytearray, torch.Tensor (dense, dtypes: "
    + ", ".join(TORCH_DTYPES)
    + "), numpy arrays and scalars (numeric and bool dtypes)"
)


class _Unsupported(Exception):
    """Raised inside the encoder; carries the path of the offending value, innermost segment first."""

    def __init__(self, message: str, *, list_supported: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.list_supported = list_supported
        self.path: list[str] = []


# ----------------------------------------------------------------------------------------------- encode


def _is_plain(obj: Any) -> bool:
    """True when ``obj`` is JSON-native through and through and needs no tag (it encodes as itself)."""
    kind = type(obj)
    if kind is str or kind is float or kind is bool or obj is None:
        return True
    if kind is int:
        return bool(_INT64_MIN <= obj <= _INT64_MAX)
    if kind is dict:
        for key, value in obj.items():
            if type(key) is not str or key == TAG or not _is_plain(value):
                return False
        return True
    if kind is list:
        return all(map(_is_plain, obj))
    return False


def _shared_hash(keys: list[Any]) -> str | None:
    """Why ``keys`` may not be set items or map keys (too many share one hash value), or ``None``."""
    if len(keys) <= MAX_SHARED_HASH:
        return None
    most = max(Counter(map(hash, keys)).values())
    if most <= MAX_SHARED_HASH:
        return None
    limit = MAX_SHARED_HASH
    return f"{most} items share one hash value; at most {limit} may (a set of them builds in quadratic time)"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _encode_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
        raise _Unsupported(
            f"a {tensor.layout} tensor on {tensor.device} cannot be written; use a dense tensor"
        )
    name = _TORCH_NAMES.get(tensor.dtype)
    if name is None:
        raise _Unsupported(
            f"tensor dtype {tensor.dtype} is not supported (supported: {', '.join(TORCH_DTYPES)})"
        )
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {TAG: "tensor", "dtype": name, "shape": list(tensor.shape), "b64": _b64(raw)}


def _numpy_name(dtype: np.dtype[Any]) -> str:
    name = dtype.name
    if name not in NUMPY_DTYPES or dtype.kind not in "biufc":
        raise _Unsupported(f"numpy dtype {dtype} is not supported (supported: {', '.join(NUMPY_DTYPES)})")
    return name


def _encode(obj: Any) -> Any:
    kind = type(obj)
    if kind is str or kind is float or kind is bool or obj is None:
        return obj
    if kind is int:
        if _INT64_MIN <= obj <= _INT64_MAX:
            return obj
        return {TAG: "int", "hex": hex(obj)}
    if kind is dict:
        if all(type(key) is str and key != TAG for key in obj):
            out: dict[str, Any] = {}
            for key, value in obj.items():
                try:
                    out[key] = _encode(value)
                except _Unsupported as exc:
                    exc.path.append(f"[{key!r}]")
                    raise
            return out
        collision = _shared_hash(list(obj))
        if collision is not None:
            raise _Unsupported(f"a dict with non-str keys whose {collision}", list_supported=False)
        pairs = []
        for key, value in obj.items():
            try:
                pairs.append([_encode(key), _encode(value)])
            except _Unsupported as exc:
                exc.path.append(f"[{key!r}]")
                raise
        return {TAG: "map", "v": pairs}
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        collision = _shared_hash(list(obj)) if kind is set or kind is frozenset else None
        if collision is not None:
            raise _Unsupported(f"a {kind.__name__} whose {collision}", list_supported=False)
        items = []
        for index, item in enumerate(obj):
            try:
                items.append(_encode(item))
            except _Unsupported as exc:
                exc.path.append(f"[{index}]")
                raise
        return items if kind is list else {TAG: kind.__name__, "v": items}
    if kind is bytes or kind is bytearray:
        return {TAG: kind.__name__, "b64": _b64(bytes(obj))}
    if isinstance(obj, torch.Tensor):
        return _encode_tensor(obj)
    if isinstance(obj, np.ndarray):
        name = _numpy_name(obj.dtype)
        raw = np.ascontiguousarray(obj, dtype=NUMPY_DTYPES[name]).tobytes()
        return {TAG: "ndarray", "dtype": name, "shape": list(obj.shape), "b64": _b64(raw)}
    if isinstance(obj, np.generic):
        name = _numpy_name(obj.dtype)
        raw = np.asarray(obj, dtype=NUMPY_DTYPES[name]).tobytes()
        return {TAG: "npscalar", "dtype": name, "b64": _b64(raw)}
    raise _Unsupported(f"values of type {kind.__module__}.{kind.__qualname__} cannot be written")


def to_json_value(obj: Any, where: str = "value") -> Any:
    """Encode ``obj`` as JSON-native data that :func:`from_json_value` turns back into an equal value.

    ``where`` names ``obj`` in error messages (e.g. ``"experiences[3].info"``). A value that is already
    JSON-native and needs no tag is returned as is (not copied). Raises :class:`TypeError` naming the path
    and type of the first value that cannot be written, and listing the supported types.
    """
    try:
        if _is_plain(obj):
            return obj
        return _encode(obj)
    except _Unsupported as exc:
        path = where + "".join(reversed(exc.path))
        supported = f"; supported: {_SUPPORTED}" if exc.list_supported else ""
        raise TypeError(f"{path}: {exc.message}{supported}") from None
    except RecursionError:
        raise TypeError(f"{where}: value is nested too deeply to be written") from None


def dumps(obj: Any, where: str = "value") -> str:
    """Encode ``obj`` with :func:`to_json_value` and render it as compact JSON text."""
    return json.dumps(to_json_value(obj, where), separators=(",", ":"))


# ----------------------------------------------------------------------------------------------- decode


def _has_tag(obj: Any) -> bool:
    """True when some dict inside ``obj`` carries the reserved key (the value needs decoding)."""
    kind = type(obj)
    if kind is dict:
        return TAG in obj or any(map(_has_tag, obj.values()))
    if kind is list:
        return any(map(_has_tag, obj))
    if kind is str or kind is float or kind is int or kind is bool or obj is None:
        return False
    raise ValueError(f"not JSON data: found a {kind.__name__}")


def _fields(obj: dict[str, Any], tag: str, keys: tuple[str, ...]) -> list[Any]:
    expected = {TAG, *keys}
    if obj.keys() != expected:
        raise ValueError(
            f"tagged value {tag!r} must have exactly the keys {sorted(expected)}, got {sorted(obj)}"
        )
    return [obj[key] for key in keys]


def _text(value: Any, tag: str, key: str) -> str:
    if type(value) is not str:
        raise ValueError(f"tagged value {tag!r}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _unb64(value: Any, tag: str) -> bytes:
    text = _text(value, tag, "b64")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError(f"tagged value {tag!r}: invalid base64 ({exc})") from None


def _shape(value: Any, tag: str) -> tuple[int, ...]:
    if type(value) is not list or len(value) > MAX_NDIM:
        raise ValueError(f"tagged value {tag!r}: shape must be a list of at most {MAX_NDIM} ints")
    for dim in value:
        if type(dim) is not int or dim < 0 or dim > _INT64_MAX:
            raise ValueError(f"tagged value {tag!r}: shape entries must be non-negative ints, got {value!r}")
    return tuple(value)


def _checked_bytes(raw: bytes, shape: tuple[int, ...], itemsize: int, tag: str) -> None:
    expected = math.prod(shape) * itemsize
    if len(raw) != expected:
        raise ValueError(
            f"tagged value {tag!r}: {len(raw)} bytes of data do not match shape {list(shape)} "
            f"({expected} bytes expected)"
        )


def _decode_tensor(obj: dict[str, Any]) -> torch.Tensor:
    dtype_name, shape_value, b64 = _fields(obj, "tensor", ("dtype", "shape", "b64"))
    dtype = TORCH_DTYPES.get(_text(dtype_name, "tensor", "dtype"))
    if dtype is None:
        raise ValueError(
            f"tagged value 'tensor': dtype {dtype_name!r} is not allowed ({', '.join(TORCH_DTYPES)})"
        )
    shape = _shape(shape_value, "tensor")
    raw = _unb64(b64, "tensor")
    _checked_bytes(raw, shape, dtype.itemsize, "tensor")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    if dtype == torch.bool and bool((data > 1).any()):
        raise ValueError("tagged value 'tensor': bool data must be 0 or 1 bytes")
    return data.view(dtype).reshape(shape)


def _decode_numpy(obj: dict[str, Any], tag: str) -> Any:
    if tag == "ndarray":
        dtype_name, shape_value, b64 = _fields(obj, tag, ("dtype", "shape", "b64"))
        shape = _shape(shape_value, tag)
    else:
        dtype_name, b64 = _fields(obj, tag, ("dtype", "b64"))
        shape = ()
    dtype = NUMPY_DTYPES.get(_text(dtype_name, tag, "dtype"))
    if dtype is None:
        raise ValueError(
            f"tagged value {tag!r}: dtype {dtype_name!r} is not allowed ({', '.join(NUMPY_DTYPES)})"
        )
    raw = _unb64(b64, tag)
    _checked_bytes(raw, shape, dtype.itemsize, tag)
    if dtype.kind == "b" and any(byte > 1 for byte in raw):
        raise ValueError(f"tagged value {tag!r}: bool data must be 0 or 1 bytes")
    array = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))
    if tag == "npscalar":
        return array[0]
    return array.reshape(shape)


def _hashable(value: Any, tag: str) -> Any:
    try:
        hash(value)
    except TypeError:
        raise ValueError(f"tagged value {tag!r}: holds an unhashable {type(value).__name__}") from None
    return value


def _refuse_shared_hash(keys: list[Any], tag: str) -> None:
    collision = _shared_hash(keys)
    if collision is not None:
        raise ValueError(f"tagged value {tag!r}: {collision}")


def _decode_tagged(obj: dict[str, Any]) -> Any:
    tag = obj[TAG]
    if tag in ("tuple", "set", "frozenset"):
        (items,) = _fields(obj, tag, ("v",))
        if type(items) is not list:
            raise ValueError(f"tagged value {tag!r}: 'v' must be a list")
        decoded = [_decode(item) for item in items]
        if tag == "tuple":
            return tuple(decoded)
        hashed = [_hashable(item, tag) for item in decoded]
        _refuse_shared_hash(hashed, tag)
        return set(hashed) if tag == "set" else frozenset(hashed)
    if tag == "map":
        (pairs,) = _fields(obj, tag, ("v",))
        if type(pairs) is not list:
            raise ValueError("tagged value 'map': 'v' must be a list of [key, value] pairs")
        if set(map(type, pairs)) - {list} or set(map(len, pairs)) - {2}:
            raise ValueError("tagged value 'map': 'v' must be a list of [key, value] pairs")
        keys = [_hashable(_decode(key), tag) for key, _ in pairs]
        _refuse_shared_hash(keys, tag)
        return dict(zip(keys, [_decode(value) for _, value in pairs], strict=True))
    if tag == "int":
        (text,) = _fields(obj, tag, ("hex",))
        text = _text(text, tag, "hex")
        digits = text[1:] if text.startswith("-") else text
        if not digits.startswith("0x") or len(digits) < 3:
            raise ValueError(f"tagged value 'int': expected hexadecimal text like '0x1f', got {text[:40]!r}")
        return int(text, 16)
    if tag in ("bytes", "bytearray"):
        (b64,) = _fields(obj, tag, ("b64",))
        raw = _unb64(b64, tag)
        return raw if tag == "bytes" else bytearray(raw)
    if tag == "tensor":
        return _decode_tensor(obj)
    if tag in ("ndarray", "npscalar"):
        return _decode_numpy(obj, tag)
    raise ValueError(f"unknown tag {tag!r} under the reserved key {TAG!r}")


def _decode(obj: Any) -> Any:
    kind = type(obj)
    if kind is dict:
        if TAG in obj:
            return _decode_tagged(obj)
        return {key: _decode(value) for key, value in obj.items()}
    if kind is list:
        return [_decode(item) for item in obj]
    if kind is str or kind is float or kind is int or kind is bool or obj is None:
        return obj
    raise ValueError(f"not JSON data: found a {kind.__name__}")


def from_json_value(obj: Any) -> Any:
    """Decode data written by :func:`to_json_value`; the exact inverse.

    ``obj`` must be JSON-native (as :func:`json.loads` returns). Data without any tag is returned as is
    (not copied). Raises :class:`ValueError` for anything :func:`to_json_value` cannot have written: an
    unknown tag, missing or extra fields, a dtype outside the allow-list, invalid base64, or a byte count
    that does not match the shape.
    """
    try:
        if not _has_tag(obj):
            return obj
        return _decode(obj)
    except RecursionError:
        raise ValueError("JSON value is nested too deeply") from None
    except (TypeError, OverflowError, RuntimeError) as exc:
        raise ValueError(f"malformed tagged JSON value: {exc}") from exc


def loads(text: str | bytes) -> Any:
    """Parse JSON text and decode it with :func:`from_json_value`; malformed input raises ValueError."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError("JSON text is nested too deeply") from None
    return from_json_value(data)
