"""Explorer steps on their way to the learner ranks, pickle-free.

An explorer process puts each step on its link as one :class:`Shipment` in bytes: an 8-byte length, a
JSON header (explorer, step, metrics, idle fraction), then the experiences in the columnar wire format
(:func:`trinity_core.codec.serialize_many`). A machine's leader rank takes step ``s`` from each of its
explorers; with several learner ranks, every rank then gets every shipment's bytes
(:func:`gather_bytes`, an all-gather of byte tensors in a gloo group) and decodes only those holding its
prompts (:func:`rank_share`). :func:`step_shipments` checks that step ``s`` came once from every
explorer: nothing lost, nothing counted twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trinity_core.codec import deserialize_many
from trinity_core.experience import Experience
from trinity_core.train.modes.layout import Layout

__all__ = ["Shipment", "gather_bytes", "pack", "rank_share", "step_metrics", "step_shipments", "unpack"]

_LENGTH = 8


@dataclass
class Shipment:
    """One explorer step, as it crosses to the learner ranks."""

    explorer: int
    step: int
    experiences: bytes
    """The step's experiences in the columnar wire format (:func:`trinity_core.codec.serialize_many`):
    one tensor per field for the whole step, where pickling them one by one takes seconds."""
    metrics: dict[str, float]
    idle_fraction: float
    """Share of the explorer's wall time so far spent waiting for room in the link."""

    def encode(self) -> bytes:
        """The shipment as bytes: length, JSON header, wire-format experiences."""
        header = {
            "explorer": self.explorer,
            "step": self.step,
            "metrics": self.metrics,
            "idle_fraction": self.idle_fraction,
        }
        raw = json.dumps(header).encode()
        return len(raw).to_bytes(_LENGTH, "little") + raw + self.experiences

    @classmethod
    def decode(cls, data: bytes) -> Shipment:
        """The shipment :meth:`encode` wrote (the experiences stay bytes until :func:`rank_share`)."""
        size = int.from_bytes(data[:_LENGTH], "little")
        header: dict[str, Any] = json.loads(data[_LENGTH : _LENGTH + size])
        return cls(
            explorer=int(header["explorer"]),
            step=int(header["step"]),
            experiences=data[_LENGTH + size :],
            metrics={k: float(v) for k, v in header["metrics"].items()},
            idle_fraction=float(header["idle_fraction"]),
        )


def pack(blobs: Sequence[bytes]) -> bytes:
    """Several byte strings as one, each after its 8-byte length."""
    return b"".join(len(blob).to_bytes(_LENGTH, "little") + blob for blob in blobs)


def unpack(data: bytes) -> list[bytes]:
    """The byte strings :func:`pack` joined."""
    blobs, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + _LENGTH], "little")
        blobs.append(data[at + _LENGTH : at + _LENGTH + size])
        at += _LENGTH + size
    return blobs


def gather_bytes(mine: bytes, world: int, group: Any) -> list[bytes]:
    """Every rank's ``mine``, in rank order (all ranks of ``group`` call it): the lengths, then the bytes
    padded to the longest, as uint8 tensors on the CPU (``group`` is a gloo group)."""
    import torch.distributed as dist

    size = torch.tensor([len(mine)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    lengths = [int(s) for s in sizes]
    longest = max(lengths)
    if longest == 0:
        return [b""] * world
    padded = torch.zeros(longest, dtype=torch.uint8)
    if mine:
        padded[: len(mine)] = torch.frombuffer(bytearray(mine), dtype=torch.uint8)
    out = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(out, padded, group=group)
    return [t[:n].numpy().tobytes() for t, n in zip(out, lengths, strict=True)]


def step_shipments(blobs: Sequence[bytes], step: int, explorers: int) -> list[Shipment]:
    """The shipments of ``step``, one per explorer in index order.

    Raises:
        RuntimeError: a shipment of another step, or an explorer missing or twice (lost or duplicated).
    """
    shipments = sorted((Shipment.decode(b) for b in blobs), key=lambda s: s.explorer)
    got = [(s.explorer, s.step + 1) for s in shipments]
    if got != [(e, step + 1) for e in range(explorers)]:
        raise RuntimeError(
            f"learner step {step + 1} expected step {step + 1} from explorers 0..{explorers - 1} once "
            f"each, got (explorer, step) {got}: experiences were lost or duplicated on the way"
        )
    return shipments


def rank_share(shipments: Sequence[Shipment], layout: Layout, prompts: int) -> list[Experience]:
    """Learner rank ``layout.rank``'s experiences of a step: the groups of its prompts
    (:meth:`Layout.prompts`), decoded from the shipments that hold them (explorer order)."""
    mine = Layout.prompts(layout.rank, layout.world, prompts)
    share: list[Experience] = []
    for shipment in shipments:
        held = Layout.prompts(shipment.explorer, len(shipments), prompts)
        if held.stop <= mine.start or held.start >= mine.stop:
            continue  # none of this rank's prompts: not decoded
        experiences = deserialize_many(shipment.experiences)
        if mine.start <= held.start and held.stop <= mine.stop:
            share.extend(experiences)
        else:
            share.extend(e for e in experiences if mine.start <= int(e.eid.task) < mine.stop)
    return share


def step_metrics(shipments: Sequence[Shipment]) -> tuple[dict[str, torch.Tensor], float]:
    """The explorers' metrics of a step (each the mean over explorers, which generate equal shares) and
    their mean idle fraction."""
    keys = sorted({k for s in shipments for k in s.metrics})
    metrics = {}
    for key in keys:
        values = [s.metrics[key] for s in shipments if key in s.metrics]
        metrics[key] = torch.tensor(math.fsum(values) / len(values), dtype=torch.float64)
    idle = math.fsum(s.idle_fraction for s in shipments) / len(shipments)
    return metrics, idle
