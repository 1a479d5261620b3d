"""The pickle-free wire format of experiences: ``serialize_many`` / ``deserialize_many``.

A payload is::

    b"TRXC" | u8 version (1) | u64 LE header length | u64 LE blob length | JSON header | safetensors blob

The JSON header is *columnar*: one entry per field over all experiences, not one record per experience.
Each tensor field (``tokens``, ``logprobs``, ...) of all experiences that have it is concatenated into a
single flat tensor of the blob; the header records which experiences have it, its dtype and the per-item
lengths or shapes (:mod:`~trinity_core.codec.tensors`). Scalar and free-form fields are columns
(:mod:`~trinity_core.codec.columns`); the blob is written and read by safetensors
(:mod:`~trinity_core.codec.blob`). See ``docs/wire-format.md`` for the full specification.

Decoding never unpickles, evaluates or looks anything up by a name taken from the payload except in fixed
allow-lists, every length, offset, index and dtype is checked, and its work and memory are bounded by a
small multiple of the payload's size (:mod:`~trinity_core.codec.decode`). Payloads of the reference
implementation are read only with the explicit, unsafe ``allow_pickle=True``.

Importing this package registers it as the wire format of :class:`~trinity_core.experience.Experience`
(its ``serialize`` methods) and as the way experiences are pickled (``copyreg``): a pickled experience is
a wire-format payload, and unpickling it runs the checked decoder, not arbitrary code.
"""

from __future__ import annotations

import copyreg
from collections.abc import Callable

import trinity_core.codec.spec as spec
from trinity_core.codec.decode import deserialize_many, deserialize_one
from trinity_core.codec.encode import serialize_many
from trinity_core.codec.spec import *  # noqa: F403  (spec.__all__, re-exported below)
from trinity_core.experience import Experience, WireFormat, register_wire_format

__all__ = ["deserialize_many", "deserialize_one", "serialize_many"]
__all__ += spec.__all__


def _reduce_experience(experience: Experience) -> tuple[Callable[..., Experience], tuple[bytes]]:
    """How pickle stores an experience: its wire-format payload, decoded again on load."""
    return deserialize_one, (serialize_many([experience]),)


register_wire_format(WireFormat(serialize_many, deserialize_many, deserialize_one))
copyreg.pickle(Experience, _reduce_experience)
