"""Helpers of the trinity-plugin-rec tests: experience builders and a plain-Python REC transcription."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from trinity_core.experience import EID, Experience


def make_group_exps(groups: Sequence[Sequence[float]], response_length: int = 3) -> list[Experience]:
    """One experience per reward; group ``g`` is task ``g`` with runs ``0..n-1``; fixed suffixes."""
    return [
        Experience(
            eid=EID(batch=0, task=task, run=run, suffix=f"s{task}r{run}"),
            tokens=list(range(2 + response_length)),
            prompt_length=2,
            reward=float(reward),
        )
        for task, rewards in enumerate(groups)
        for run, reward in enumerate(rewards)
    ]


def scores(exps: Sequence[Experience]) -> torch.Tensor:
    """The per-experience score: the first response entry of ``advantages`` (float64)."""
    return torch.tensor([float(e.advantages[0]) for e in exps], dtype=torch.float64)


def key(uid: str, seed: int) -> int:
    """The documented drop key ``blake2b(f"{seed}/{uid}")``, 7 bytes big-endian."""
    return int.from_bytes(hashlib.blake2b(f"{seed}/{uid}".encode(), digest_size=7).digest(), "big")


def python_rec(
    exps: Sequence[Experience], *, epsilon: float, std_normalize: bool, drop: str | None, seed: int
) -> dict[str, tuple[float, bool]]:
    """uid -> (advantage, dropped), from the documented formulas with Python floats (math.fsum)."""
    import math

    out: dict[str, tuple[float, bool]] = {}
    tasks: dict[object, list[Experience]] = {}
    for e in exps:
        tasks.setdefault(e.eid.task, []).append(e)
    for group in tasks.values():
        r = [float(e.reward) for e in group]  # type: ignore[arg-type]
        n = len(r)
        mean1 = math.fsum(r) / n if len(set(r)) > 1 else r[0]
        neg = [i for i in range(n) if r[i] < mean1]
        dropped: set[int] = set()
        if drop == "balance":
            extra = max(2 * len(neg) - n, 0)
            dropped = set(sorted(neg, key=lambda i: key(group[i].eid.uid, seed))[:extra])
        kept = [r[i] for i in range(n) if i not in dropped]
        mean = math.fsum(kept) / len(kept) if len(set(kept)) > 1 else kept[0]
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in kept) / len(kept))
        for i, e in enumerate(group):
            dev = 0.0 if i in dropped else r[i] - mean
            out[e.eid.uid] = ((dev / (std + epsilon) if std_normalize else dev), i in dropped)
    return out
