"""JSON text of a payload, read strictly and in time linear in its size.

Both JSON documents of a payload (the header and the safetensors header) are UTF-8 text whose nesting
is at most :data:`~trinity_core.codec.spec.MAX_JSON_DEPTH` arrays and objects deep, and in which no
object repeats a key. :func:`parse_json` checks the depth with a scan of the text *before* ``json.loads``
recurses into it, and refuses a repeated key while the objects are built, with a set lookup per key.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from trinity_core.codec.spec import MAX_JSON_DEPTH, Malformed, require

__all__ = ["json_depth", "nesting_error", "parse_json", "strict_object"]

#: Every byte except the brackets and the quote: deleted to keep only the structure of the text.
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))
#: +1 for an opening bracket, -1 for a closing one, 0 for the quote.
_STEP = np.zeros(256, dtype=np.int32)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1
_QUOTE = ord('"')


def json_depth(text: bytes) -> int:
    """The deepest nesting of arrays and objects in UTF-8 JSON ``text`` (0 for a scalar).

    Brackets inside strings do not count. Escaped backslashes are dropped first and escaped quotes
    next, as a JSON parser reads a string from left to right; every ``"`` left then opens or closes a
    string, so a bracket is inside one when an odd number of quotes precede it. For text that is not
    valid JSON the result is exact up to the first error a parser finds, which is all a parser reads.
    The work is a few passes of ``bytes`` methods over the text and of numpy over its brackets and
    quotes, whatever the text holds.
    """
    unescaped = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = np.frombuffer(unescaped.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    if not skeleton.size:
        return 0
    steps = _STEP[skeleton]  # a new array
    if b'"' in unescaped:
        outside = np.cumsum(skeleton == _QUOTE, dtype=np.int32)
        outside &= 1
        outside -= 1  # 0 inside a string (after an odd number of quotes), -1 (every bit set) outside
        steps &= outside
    np.cumsum(steps, out=steps)
    return max(0, int(steps.max()))


def nesting_error(text: bytes, what: str) -> str | None:
    """Why ``text`` (JSON, named ``what``) nests too deeply for the reader, or ``None`` when it does not."""
    if text.count(b"[") + text.count(b"{") <= MAX_JSON_DEPTH:  # fewer brackets cannot nest deeper
        return None
    depth = json_depth(text)
    if depth <= MAX_JSON_DEPTH:
        return None
    return f"{what} nests arrays and objects {depth} deep; the limit is MAX_JSON_DEPTH = {MAX_JSON_DEPTH}"


def strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object from its key-value pairs, refusing a key that appears twice.

    ``json.loads`` would keep the last of two equal keys; a payload that says two things about one
    field is malformed, whichever the writer meant.
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            require(key not in seen, f"duplicate key {key!r} in a JSON object")
            seen.add(key)
    return obj


def parse_json(text: bytes, what: str) -> Any:
    """The JSON document ``text``, after checking that it is UTF-8 and at most ``MAX_JSON_DEPTH`` deep.

    Raises :class:`~trinity_core.codec.spec.Malformed` for text that is not UTF-8, nests deeper than the
    limit or repeats a key in an object; ``json.loads`` raises ``ValueError`` for text that is not JSON.
    """
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    problem = nesting_error(text, what)
    if problem is not None:
        raise Malformed(problem)
    return json.loads(decoded, object_pairs_hook=strict_object)
