"""Helpers of the trinity-plugin-clip-filters tests: grouped trainer batches and the reference's view."""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trinity_core.batch import ExperienceBatch
from trinity_core.experience import EID, Experience


def make_batch(
    rewards: Sequence[Sequence[float]],
    width: int,
    seed: int = 0,
    *,
    logprobs: torch.Tensor | None = None,
    entropys: torch.Tensor | None = None,
    necs: torch.Tensor | None = None,
    full: bool = False,
) -> ExperienceBatch:
    """Group ``g`` = task ``g`` with rewards ``rewards[g]``; random log-probs / masks unless given.

    Responses have random lengths 1..width (``full``: all ``width``); columns ``entropys``/``necs`` are
    random unless given; given tensors are ``(N, width)``.
    """
    g = torch.Generator().manual_seed(seed)
    exps = []
    for task, row in enumerate(rewards):
        for run, reward in enumerate(row):
            i = len(exps)
            n = width if full else int(torch.randint(1, width + 1, (), generator=g))
            mask = torch.rand(n, generator=g) > 0.15
            mask[0] = True
            lp = -torch.rand(n, generator=g) * 3 - 0.01 if logprobs is None else logprobs[i, :n]
            exps.append(
                Experience(
                    eid=EID(batch=1, task=task, run=run, suffix=f"c{i}"),
                    tokens=list(range(3 + n)),
                    prompt_length=3,
                    reward=float(reward),
                    logprobs=lp,
                    action_mask=mask if not full else torch.ones(n, dtype=torch.bool),
                )
            )
    batch = ExperienceBatch.from_experiences(exps, max_response_length=width)
    n_rows = len(exps)
    batch.extras["entropys"] = torch.rand(n_rows, width, generator=g) * 3 if entropys is None else entropys
    batch.extras["necs"] = torch.randn(n_rows, width, generator=g) if necs is None else necs
    return batch


def reference_module(name: str) -> types.ModuleType:
    """Import a reference advantage module (their verl import is for type checking only)."""
    from trinity_core.testing.reference import import_reference

    if "verl" not in sys.modules:
        try:
            import verl  # noqa: F401
        except ImportError:
            sys.modules["verl"] = types.ModuleType("verl")
    return import_reference(name)


class FakeDataProto:
    """The part of verl's DataProto the reference advantage functions use."""

    def __init__(self, batch: dict[str, torch.Tensor], non_tensor_batch: dict[str, Any]) -> None:
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch


def reference_inputs(batch: ExperienceBatch) -> FakeDataProto:
    """The reference's view: token_level_rewards, float response_mask, uid per task, log-probs, columns."""
    assert batch.action_mask is not None
    assert batch.logprobs is not None
    uid = np.array([e.eid.tid for e in batch.experiences], dtype=object)
    return FakeDataProto(
        {
            "token_level_rewards": batch.token_level_scores().clone(),
            "response_mask": batch.action_mask.to(torch.float32),
            "rollout_log_probs": batch.logprobs.clone(),
            "old_log_probs": batch.logprobs.clone(),
            "entropys": batch.extras["entropys"].clone(),
            "necs": batch.extras["necs"].clone(),
        },
        {"uid": uid},
    )


def plant_nan(batch: ExperienceBatch) -> None:
    """NaN in every float column wherever the action mask is False."""
    assert batch.action_mask is not None
    assert batch.logprobs is not None
    hole = ~batch.action_mask
    for column in (batch.logprobs, batch.extras["entropys"], batch.extras["necs"]):
        column[hole] = float("nan")
