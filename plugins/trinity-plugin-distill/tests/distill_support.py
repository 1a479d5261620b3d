"""Helpers of the trinity-plugin-distill tests: batches with teacher log-probs and the reference's inputs."""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from typing import Any

import torch

from trinity_core.batch import ExperienceBatch
from trinity_core.experience import EID, Experience


def make_batch(
    student: Sequence[Sequence[float]],
    teacher: Sequence[Sequence[float]] | None,
    masks: Sequence[Sequence[bool]] | None = None,
) -> ExperienceBatch:
    """One experience per row (response = the row's length); ``masks`` default to all True."""
    exps = []
    for i, row in enumerate(student):
        n = len(row)
        exps.append(
            Experience(
                eid=EID(batch=0, task=i // 2, run=i % 2, suffix=f"d{i}"),
                tokens=list(range(2 + n)),
                prompt_length=2,
                reward=0.0,
                logprobs=list(row),
                teacher_logprobs=None if teacher is None else list(teacher[i]),
                action_mask=None if masks is None else list(masks[i]),
            )
        )
    return ExperienceBatch.from_experiences(exps)


def random_batch(seed: int, rows: int, width: int) -> ExperienceBatch:
    """Random log-probs in [-4, -0.01], random lengths 1..width, action masks with holes."""
    g = torch.Generator().manual_seed(seed)
    student, teacher, masks = [], [], []
    for _ in range(rows):
        n = int(torch.randint(1, width + 1, (), generator=g))
        student.append((-torch.rand(n, generator=g) * 4 - 0.01).tolist())
        teacher.append((-torch.rand(n, generator=g) * 4 - 0.01).tolist())
        m = torch.rand(n, generator=g) > 0.2
        m[0] = True
        masks.append(m.tolist())
    return make_batch(student, teacher, masks)


def plant_nan(batch: ExperienceBatch) -> None:
    """NaN in the student and teacher columns wherever the action mask is False."""
    assert batch.action_mask is not None
    assert batch.logprobs is not None
    assert batch.teacher_logprobs is not None
    hole = ~batch.action_mask
    batch.logprobs[hole] = float("nan")
    batch.teacher_logprobs[hole] = float("nan")


class FakeDataProto:
    """The part of verl's DataProto the reference advantage functions use."""

    def __init__(
        self, batch: dict[str, torch.Tensor], non_tensor_batch: dict[str, Any] | None = None
    ) -> None:
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch or {}


def reference_module(name: str) -> types.ModuleType:
    """Import a reference advantage module; a stand-in ``verl`` (DataProto only) when verl is absent."""
    from trinity_core.testing.reference import import_reference

    if "verl" not in sys.modules:
        try:
            import verl  # noqa: F401
        except ImportError:
            stub = types.ModuleType("verl")
            stub.DataProto = FakeDataProto  # type: ignore[attr-defined]
            sys.modules["verl"] = stub
    return import_reference(name)


def reference_inputs(batch: ExperienceBatch) -> FakeDataProto:
    """The reference's view of ``batch``: old_log_probs, teacher_logprobs, float response_mask."""
    assert batch.action_mask is not None
    assert batch.logprobs is not None
    assert batch.teacher_logprobs is not None
    return FakeDataProto(
        {
            "old_log_probs": batch.logprobs.clone(),
            "teacher_logprobs": batch.teacher_logprobs.clone(),
            "response_mask": batch.action_mask.to(torch.float32),
        }
    )
