"""The frame of a payload: the fixed prefix and the JSON header, written and checked.

A payload is ``prefix | JSON header | safetensors blob``, the prefix being ``b"TRXC"``, a ``u8`` version
and the two lengths as ``u64`` little-endian. The JSON header is padded with spaces so that the blob
starts at an offset that is a multiple of 8.
"""

from __future__ import annotations

import json
from typing import Any

from trinity_core.codec.jsontext import nesting_error, parse_json
from trinity_core.codec.spec import (
    MAGIC,
    MAX_HEADER_BYTES,
    MAX_ITEMS,
    PREFIX,
    VERSION,
    require,
)

__all__ = ["HEADER_KEYS", "frame", "parse_header", "split_payload"]

#: Keys of the JSON header's top-level object (``mm`` is optional).
HEADER_KEYS = frozenset({"n", "columns", "tensors", "mm"})


def frame(header: dict[str, Any], blob: bytes) -> bytes:
    """The payload of ``header`` and ``blob``: prefix, JSON header padded to 8 bytes, blob.

    Raises :class:`ValueError` when the header nests deeper than the reader accepts (``MAX_JSON_DEPTH``).
    """
    header_bytes = json.dumps(header, separators=(",", ":")).encode("ascii")
    problem = nesting_error(header_bytes, "the JSON header")
    if problem is not None:
        raise ValueError(problem)
    header_bytes += b" " * (-(PREFIX.size + len(header_bytes)) % 8)
    return b"".join((PREFIX.pack(MAGIC, VERSION, len(header_bytes), len(blob)), header_bytes, blob))


def split_payload(data: bytes) -> tuple[bytes, bytes]:
    """The JSON header bytes and the blob bytes of ``data``, after checking the prefix."""
    size = PREFIX.size
    require(len(data) >= size, f"payload of {len(data)} bytes is shorter than the {size}-byte prefix")
    magic, version, header_len, blob_len = PREFIX.unpack_from(data)
    require(magic == MAGIC, f"bad magic {magic!r}")
    require(version == VERSION, f"unsupported version {version} (this reader knows version {VERSION})")
    require(
        header_len <= MAX_HEADER_BYTES, f"header length {header_len} exceeds the limit {MAX_HEADER_BYTES}"
    )
    expected = size + header_len + blob_len
    require(
        expected == len(data),
        f"the prefix's lengths ({header_len} + {blob_len}) need {expected} bytes; got {len(data)}",
    )
    return data[size : size + header_len], data[size + header_len :]


def parse_header(header_bytes: bytes) -> dict[str, Any]:
    """The JSON header, checked at the top level: known keys, ``n`` in range, ``columns`` and ``tensors``
    objects. Text nested deeper than ``MAX_JSON_DEPTH`` or with a repeated key in any object is refused."""
    header = parse_json(header_bytes, "the JSON header")
    require(type(header) is dict, "header must be a JSON object")
    require(header.keys() <= HEADER_KEYS and {"n", "columns", "tensors"} <= header.keys(), "bad header keys")
    count = header["n"]
    require(type(count) is int and 0 <= count <= MAX_ITEMS, f"'n' must be an int in 0..{MAX_ITEMS}")
    require(type(header["columns"]) is dict, "'columns' must be an object")
    require(type(header["tensors"]) is dict, "'tensors' must be an object")
    return header  # type: ignore[no-any-return]
