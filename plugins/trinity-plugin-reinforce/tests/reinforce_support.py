"""Helpers of the trinity-plugin-reinforce tests: builders, textbook loops, the reference's DataProto."""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trinity_core.batch import ExperienceBatch
from trinity_core.experience import EID, Experience
from trinity_core.testing.reference import import_reference


@dataclass
class Spec:
    """One response: its task, scalar reward, action mask (its length is the response length)."""

    task: int
    reward: float
    mask: Sequence[bool]
    token_rewards: Sequence[float] | None = None
    run: int = 0


def make_exps(specs: Sequence[Spec]) -> list[Experience]:
    """Experiences with a 2-token prompt; ``token_level_reward`` set when every spec gives one."""
    exps = []
    for i, s in enumerate(specs):
        exps.append(
            Experience(
                eid=EID(batch=0, task=s.task, run=s.run, suffix=f"e{i}"),
                tokens=list(range(2 + len(s.mask))),
                prompt_length=2,
                reward=float(s.reward),
                action_mask=list(s.mask),
                token_level_reward=None if s.token_rewards is None else list(s.token_rewards),
            )
        )
    return exps


def make_batch(specs: Sequence[Spec], extras: dict[str, torch.Tensor] | None = None) -> ExperienceBatch:
    batch = ExperienceBatch.from_experiences(make_exps(specs))
    batch.extras.update(extras or {})
    return batch


def group_specs(groups: Sequence[Sequence[float]], length: int = 3) -> list[Spec]:
    """One full-mask response of ``length`` tokens per reward; group ``g`` is task ``g``."""
    return [
        Spec(task=g, reward=r, mask=[True] * length, run=j)
        for g, rs in enumerate(groups)
        for j, r in enumerate(rs)
    ]


def scores_of(batch: ExperienceBatch) -> np.ndarray:
    """``(N, R)`` float64 numpy token scores exactly as the trainer-side functions read them."""
    return batch.token_level_scores().double().numpy()


def np_masked_returns(scores: np.ndarray, lengths: np.ndarray, mask: np.ndarray, gamma: float) -> np.ndarray:
    """Textbook loop of the documented recursion: H_t = r_t + d_t H_{t+1}, d_t = γ if m_{t+1} else 1."""
    out = np.zeros_like(scores)
    for i in range(scores.shape[0]):
        running = 0.0
        for t in reversed(range(scores.shape[1])):
            r = scores[i, t] if t < lengths[i] else 0.0
            d = gamma if t + 1 < scores.shape[1] and mask[i, t + 1] else 1.0
            running = r + d * running
            out[i, t] = running
    return out


def np_whiten(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``(v − μ)/sqrt(var_unbiased + 1e-8)`` over the selected entries; 0 elsewhere."""
    sel = values[mask]
    var = sel.var(ddof=1) if sel.size > 1 else 0.0
    return np.where(mask, (values - sel.mean()) / np.sqrt(var + 1e-8), 0.0)


def np_rloo(s: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Leave-one-out loop: mean of the other members; 0 for a singleton."""
    out = np.zeros_like(s)
    for i in range(len(s)):
        others = [s[j] for j in range(len(s)) if groups[j] == groups[i] and j != i]
        out[i] = s[i] - np.mean(others) if others else 0.0
    return out


def np_group_centred(s: np.ndarray, groups: np.ndarray) -> np.ndarray:
    return np.array([s[i] - s[groups == groups[i]].mean() for i in range(len(s))])


# ---------------------------------------------------------------------------------------- reference


@dataclass
class DataProto:
    """Just enough of verl's ``DataProto`` for the reference's trainer-side advantage functions."""

    batch: dict[str, torch.Tensor]
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)


def reference_module(name: str) -> types.ModuleType:
    """``import_reference(name)`` with a stand-in ``verl`` package (the reference imports ``DataProto``)."""
    if "verl" not in sys.modules:
        try:
            import verl  # noqa: F401
        except ImportError:
            stub = types.ModuleType("verl")
            stub.DataProto = DataProto  # type: ignore[attr-defined]
            sys.modules["verl"] = stub
    return import_reference(name)


def reference_proto(batch: ExperienceBatch, **extra: torch.Tensor) -> DataProto:
    """The DataProto the reference trainer builds: rewards, the response mask as float, ``uid = tid``."""
    return DataProto(
        batch={
            "token_level_rewards": batch.token_level_scores().clone(),
            "response_mask": batch.response_mask.float(),
            **extra,
        },
        non_tensor_batch={"uid": np.array([e.eid.tid for e in batch.experiences], dtype=object)},
    )
