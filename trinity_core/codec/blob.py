"""The tensor blob of a payload: written by ``safetensors.torch.save``, read by ``safetensors.torch.load``.

The blob holds one flat tensor per tensor field (the tensors of every experience that has it, one after
another), the numeric columns in their blob form and, one by one, the tensors of per-item fields. Before
safetensors parses the blob, :func:`read_blob` checks the rules our format adds to safetensors' own:
dtype codes from the allow-list, every tensor aligned to its element size, and no repeated name. The
library then checks the rest (offsets in range and tiling the data exactly, sizes matching shapes).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save
from torch import Tensor

from trinity_core.codec.jsontext import parse_json
from trinity_core.codec.spec import DTYPE_NAMES, SAFETENSORS_CODES, Malformed, ints, numel, require

__all__ = ["BlobEntry", "Ragged", "blob_tensor", "read_blob", "write_blob"]

_LENGTH = struct.Struct("<Q")


class Ragged(Exception):
    """Internal: the pieces of an entry with ``rows`` turned out not to share one 1-D shape."""


class BlobEntry:
    """One tensor of the blob: its name, dtype, shape and the pieces concatenated into it.

    ``rows`` is set when the pieces are taken to be ``rows`` 1-D tensors of one length without having
    been measured; :meth:`tensor` then checks it.
    """

    __slots__ = ("dtype", "name", "pieces", "rows", "shape")

    def __init__(
        self,
        name: str,
        dtype: torch.dtype,
        shape: list[int],
        pieces: Sequence[Tensor],
        rows: int | None = None,
    ) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.pieces = pieces
        self.rows = rows

    def tensor(self) -> Tensor:
        """The pieces, flattened and concatenated into one new CPU tensor of :attr:`shape`.

        Pieces of an entry with ``rows`` are stacked, which raises unless every piece has exactly the
        same shape: that is the check that lets the encoder skip reading their shapes. A failure raises
        :class:`Ragged`.
        """
        pieces = self.pieces
        with torch.no_grad():
            if self.rows is not None:
                try:
                    return torch.stack(list(pieces)).reshape(self.shape).cpu()
                except RuntimeError as exc:  # another shape somewhere (or another device)
                    raise Ragged(self.name) from exc
            # A fresh tensor even for one piece: safetensors refuses tensors that share memory.
            out = torch.empty(numel(self.shape), dtype=self.dtype)
            flat = [piece.reshape(-1) for piece in pieces]
            try:
                torch.cat(flat, out=out)
            except RuntimeError:  # pieces on other devices: copy one by one
                offset = 0
                for piece in flat:
                    out[offset : offset + piece.numel()].copy_(piece)
                    offset += piece.numel()
            return out.view(self.shape)


def write_blob(entries: list[BlobEntry]) -> bytes:
    """The safetensors bytes of ``entries`` (one call to ``safetensors.torch.save`` for the batch).

    safetensors orders tensors by element size, largest first, and pads its header to a multiple of 8
    bytes, so every tensor starts at an offset aligned to its element size.
    """
    return save({entry.name: entry.tensor() for entry in entries})


def _check_layout(blob: bytes) -> None:
    """Check the rules the format adds to safetensors': allowed dtypes, aligned data, unique names."""
    require(len(blob) >= 8, f"safetensors blob of {len(blob)} bytes is shorter than its 8-byte length")
    (header_len,) = _LENGTH.unpack_from(blob)
    require(header_len <= len(blob) - 8, f"safetensors header length {header_len} exceeds the blob")
    header = parse_json(blob[8 : 8 + header_len], "the safetensors header")
    require(type(header) is dict, "safetensors header must be a JSON object")
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        what = f"safetensors entry {name!r}"
        require(
            type(entry) is dict and entry.keys() == {"dtype", "shape", "data_offsets"}, f"{what}: bad keys"
        )
        code = entry["dtype"]
        dtype = SAFETENSORS_CODES.get(code) if type(code) is str else None
        require(dtype is not None, f"{what}: dtype {code!r} is not allowed")
        assert dtype is not None
        offsets = ints(entry["data_offsets"], f"{what}.data_offsets")
        require(len(offsets) == 2, f"{what}: data_offsets must be [begin, end]")
        require(offsets[0] % dtype.itemsize == 0, f"{what}: data is not aligned to its element size")


def read_blob(blob: bytes) -> dict[str, Tensor]:
    """The tensors of a payload's blob, each a writable CPU tensor that owns its memory."""
    _check_layout(blob)
    try:
        return load(blob)
    except SafetensorError as exc:
        raise Malformed(f"safetensors blob: {exc}") from None


def _check_bool(tensor: Tensor, what: str) -> None:
    if tensor.dtype == torch.bool and tensor.numel():
        # Through numpy: its reduction over uint8 is vectorised, torch's max over uint8 is not.
        require(
            int(tensor.reshape(-1).view(torch.uint8).numpy().max()) <= 1, f"{what}: bool bytes must be 0 or 1"
        )


def blob_tensor(blob: dict[str, Tensor], key: str, used: set[str]) -> Tensor:
    """Tensor ``key`` of the blob, checked (allowed dtype, valid bools) and marked as used (once)."""
    tensor: Any = blob.get(key)
    require(tensor is not None, f"tensor {key!r} is missing from the safetensors blob")
    require(tensor.dtype in DTYPE_NAMES, f"tensor {key!r} has a dtype outside the allow-list: {tensor.dtype}")
    require(key not in used, f"tensor {key!r} is used twice")
    _check_bool(tensor, f"tensor {key!r}")
    used.add(key)
    return tensor  # type: ignore[no-any-return]
