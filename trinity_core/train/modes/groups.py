"""The process groups of several learner ranks with explorer processes, beside the launch's own.

* **experiences**: every learner rank gets every explorer shipment's bytes of a step (an all-gather of
  byte tensors, :func:`~trinity_core.train.modes.shipments.gather_bytes`) in a gloo group: they are host
  data whatever the device, and the group's timeout covers a leader's wait for its explorers;
* **weights**: rank 0, which holds the full weights (under FSDP gathered once per sync, as ``save_state``
  does), broadcasts them to the other machines' leader ranks, which hand them to their explorers
  (``synchronizer.method: memory`` on several machines); gloo on the CPU, NCCL on GPUs. With
  ``method: checkpoint`` rank 0 writes the file on the shared filesystem instead and the leaders only
  wait for it (a barrier in the same group).

``torch.distributed.new_group`` is collective: every rank makes both groups, in this order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
from torch import Tensor

from trinity_core.train.modes.layout import Layout
from trinity_core.train.report.result import LaunchError

__all__ = ["PeerLost", "RankGroups", "broadcast_state"]


class PeerLost(LaunchError):
    """A collective call between learner ranks failed: another process of the launch ended (or hung)."""


@contextmanager
def _peers(rank: int, what: str) -> Iterator[None]:
    """Turn a failed collective of ``what`` into one line (gloo and NCCL raise a RuntimeError whose text
    names the transport, not the run)."""
    try:
        yield
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PeerLost(
            f"learner rank {rank}: {what} failed ({first[:200]}); another process of the launch ended or "
            "stopped answering: its own error, above, says why"
        ) from exc


class RankGroups:
    """The groups of one run (see the module's docstring); nothing to make with one learner rank.

    Args:
        layout: the launch's layout.
        method: ``synchronizer.method``.
        wait_s: how long a rank may wait in the experience exchange (a leader's wait for its explorers).
    """

    def __init__(self, layout: Layout, method: str, wait_s: float) -> None:
        """Make the groups (collective: every rank of the launch calls it)."""
        import torch.distributed as dist

        self.layout, self.method = layout, method
        self.experiences: Any = None
        self.leaders: Any = None
        self.device = torch.device("cpu")
        self.broadcasts = 0
        """Weight broadcasts this rank took part in (rank 0 sent, other leaders received)."""
        if layout.world == 1:
            return
        timeout = timedelta(seconds=wait_s)
        self.experiences = dist.new_group(backend="gloo", timeout=timeout)
        if len(layout.publishers) > 1:
            backend = "nccl" if dist.get_backend() == "nccl" else "gloo"
            self.leaders = dist.new_group(layout.publishers, backend=backend, timeout=timeout)
            if backend == "nccl":
                self.device = torch.device("cuda", torch.cuda.current_device())

    def gather(self, mine: bytes) -> list[bytes]:
        """Every rank's bytes, in rank order (every rank calls it)."""
        from trinity_core.train.modes.shipments import gather_bytes

        if self.experiences is None:
            return [mine]
        with _peers(self.layout.rank, "the exchange of the explorers' experiences"):
            return gather_bytes(mine, self.layout.world, self.experiences)

    def weights(self, accelerator: Any, model: Any, policy: Any) -> dict[str, Tensor] | None:
        """The full weights on the ranks that publish them to explorers, else None (every rank calls it).

        Rank 0 takes them from its model (under FSDP: ``get_state_dict``, collective); other machines'
        leaders get them by the broadcast (``memory``) or not at all (``checkpoint``: rank 0's file).
        """
        layout = self.layout
        state = _full_weights(accelerator, model, policy)
        if self.leaders is None or layout.rank not in layout.publishers:
            return state if layout.rank == 0 else None
        if self.method == "checkpoint":
            return state if layout.rank == 0 else None
        self.broadcasts += 1
        with _peers(layout.rank, "the broadcast of the weights to the other machines"):
            return broadcast_state(state if layout.rank == 0 else None, self.leaders, self.device)

    def written(self) -> None:
        """Rank 0 has written the weights file: the leaders wait for each other (``checkpoint`` on several
        machines; a no-op elsewhere)."""
        import torch.distributed as dist

        if (
            self.method == "checkpoint"
            and self.leaders is not None
            and self.layout.rank in self.layout.publishers
        ):
            dist.barrier(group=self.leaders)


def _full_weights(accelerator: Any, model: Any, policy: Any) -> dict[str, Tensor] | None:
    """The policy's whole state dict on rank 0: gathered under FSDP (every rank calls it), else rank 0's
    own (data parallelism keeps whole weights on every rank)."""
    if getattr(accelerator.distributed_type, "value", "") == "FSDP":
        state: dict[str, Tensor] = accelerator.get_state_dict(model)
        return state if accelerator.process_index == 0 else None
    return policy.state_dict() if accelerator.process_index == 0 else None


def broadcast_state(state: dict[str, Tensor] | None, group: Any, device: torch.device) -> dict[str, Tensor]:
    """``state`` from the group's first rank (which passes it; the others pass None) to every member, as
    CPU tensors: a JSON header of names, dtypes and shapes, then one flat buffer per dtype."""
    import torch.distributed as dist

    source = dist.get_global_rank(group, 0)
    if state is not None:
        header = json.dumps(
            [[k, str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in state.items()]
        )
        raw = torch.frombuffer(bytearray(header.encode()), dtype=torch.uint8).to(device)
        size = torch.tensor([raw.numel()], dtype=torch.int64, device=device)
    else:
        size = torch.zeros(1, dtype=torch.int64, device=device)
    dist.broadcast(size, source, group=group)
    if state is None:
        raw = torch.empty(int(size), dtype=torch.uint8, device=device)
    dist.broadcast(raw, source, group=group)
    entries = json.loads(raw.cpu().numpy().tobytes())
    out: dict[str, Tensor] = {}
    for dtype_name in dict.fromkeys(dtype for _, dtype, _ in entries):
        dtype = getattr(torch, dtype_name)
        names = [(k, shape) for k, d, shape in entries if d == dtype_name]
        if state is not None:
            flat = torch.cat([state[k].detach().reshape(-1).to(device) for k, _ in names])
        else:
            flat = torch.empty(sum(math.prod(shape) for _, shape in names), dtype=dtype, device=device)
        dist.broadcast(flat, source, group=group)
        flat, at = flat.cpu(), 0
        for k, shape in names:
            n = math.prod(shape)
            out[k] = flat[at : at + n].view(shape)
            at += n
    return out
