"""Seeded test inputs: padded loss tensors and groups of experiences.

Everything comes from a ``torch.Generator`` seeded by the caller, so a failure is reproducible.

Loss inputs (trinity names, ``B`` in {4, 6}, ``T`` in 7..12): ``action_mask`` ``(B, T)`` bool with
right padding, an interior hole in some rows and at least one selected token per row; ``logprob``,
``old_logprob``, ``ref_logprob``, ``teacher_logprob`` (negative), ``advantages``, ``returns``, ``values``,
``token_level_scores``, ``token_level_rewards`` (standard normal), ``entropy`` (positive), ``vpreds``
(``values`` plus noise of std 0.5, so some cross a value clip), all float32 ``(B, T)``; ``expert_mask``
``(B,)`` bool; ``step`` ``(B,)`` int64 (one value).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.experience import EID, Experience

__all__ = [
    "GROUP_SIZE",
    "LOSS_INPUT_NAMES",
    "float_matrices",
    "group_experiences",
    "loss_inputs",
    "plant_masked",
]

GROUP_SIZE = 4
"""Members per group in generated experience batches."""

LOSS_INPUT_NAMES: tuple[str, ...] = (
    "logprob",
    "old_logprob",
    "ref_logprob",
    "teacher_logprob",
    "advantages",
    "returns",
    "values",
    "token_level_scores",
    "token_level_rewards",
    "entropy",
    "vpreds",
    "action_mask",
    "expert_mask",
    "step",
)
"""Inputs the kit can generate for a loss; a loss needing others declares ``conformance_inputs``."""

# Values planted at masked positions, cycled: every kind of non-finite number.
_POISON = (math.nan, math.inf, -math.inf)


def _uniform(g: torch.Generator, shape: tuple[int, ...], low: float, high: float) -> Tensor:
    return torch.rand(shape, generator=g) * (high - low) + low


def loss_inputs(seed: int) -> dict[str, Tensor]:
    """A fresh set of loss inputs (see the module docstring); nothing requires grad yet."""
    g = torch.Generator().manual_seed(seed)
    B = 4 + 2 * int(torch.randint(0, 2, (), generator=g))
    T = int(torch.randint(7, 13, (), generator=g))
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    lengths[0] = T - 2  # at least one padded position
    lengths[1] = T  # at least one full row
    mask = torch.arange(T)[None, :] < lengths[:, None]
    mask[::2, 1] = False  # an interior hole in every other row
    logprob = -_uniform(g, (B, T), 0.05, 4.0)
    inputs = {
        "logprob": logprob,
        "old_logprob": (logprob + 0.2 * torch.randn((B, T), generator=g)).clamp(max=-1e-3),
        "ref_logprob": (logprob + 0.3 * torch.randn((B, T), generator=g)).clamp(max=-1e-3),
        "teacher_logprob": (logprob + 0.3 * torch.randn((B, T), generator=g)).clamp(max=-1e-3),
        "advantages": torch.randn((B, T), generator=g),
        "returns": torch.randn((B, T), generator=g),
        "values": torch.randn((B, T), generator=g),
        "token_level_scores": torch.randn((B, T), generator=g),
        "token_level_rewards": torch.randn((B, T), generator=g),
        "entropy": _uniform(g, (B, T), 0.1, 3.0),
        "action_mask": mask,
        "expert_mask": torch.arange(B) % 2 == 1,
        "step": torch.full((B,), 3, dtype=torch.int64),
    }
    # Drawn last, so that the inputs above stay what they were before value losses existed.
    inputs["vpreds"] = inputs["values"] + 0.5 * torch.randn((B, T), generator=g)
    return inputs


def float_matrices(inputs: Mapping[str, Any], mask: Tensor) -> list[str]:
    """Names of the floating ``(B, T)`` tensors among ``inputs`` (the ones masking applies to)."""
    return [
        k
        for k, v in inputs.items()
        if isinstance(v, Tensor) and v.is_floating_point() and v.shape == mask.shape
    ]


def plant_masked(inputs: Mapping[str, Any], mask: Tensor) -> dict[str, Any]:
    """A copy of ``inputs`` with NaN, +inf and -inf (cycled) at every masked position of each float
    ``(B, T)`` tensor."""
    out = dict(inputs)
    hidden = ~mask.bool()
    n = int(hidden.sum())
    poison = torch.tensor(_POISON * (n // len(_POISON) + 1))[:n]
    for key in float_matrices(inputs, mask):
        planted = inputs[key].detach().clone()
        planted[hidden] = poison.to(planted.dtype)
        out[key] = planted
    return out


def _eid(level: str, group: int, member: int) -> EID:
    # Members of one group share the id of ``level`` and differ in the others.
    suffix = f"kit{group}x{member}"
    if level == "run":
        return EID(batch=0, task=group, run=0, step=member, suffix=suffix)
    if level == "step":
        return EID(batch=0, task=group, run=member, step=0, suffix=suffix)
    return EID(batch=0, task=group, run=member, step=0, suffix=suffix)


def group_experiences(
    rewards: Sequence[Sequence[float]],
    *,
    seed: int,
    level: str = "task",
    order: Sequence[tuple[int, int]] | None = None,
) -> list[Experience]:
    """Experiences in groups: ``rewards[g][j]`` is the reward of member ``j`` of group ``g``.

    Tokens, masks and log-probs depend only on ``(seed, g, j)``, so two calls build identical
    experiences (same ``eid.uid``) whatever the rewards. ``order`` lists ``(g, j)`` pairs in the order
    wanted (default: group by group).
    """
    if order is None:
        order = [(gi, j) for gi, row in enumerate(rewards) for j in range(len(row))]
    out = []
    for gi, j in order:
        g = torch.Generator().manual_seed(seed * 10_007 + gi * 101 + j)
        prompt = int(torch.randint(2, 5, (), generator=g))
        response = int(torch.randint(3, 8, (), generator=g))
        mask = torch.ones(response, dtype=torch.bool)
        mask[1:] = torch.rand(response - 1, generator=g) > 0.25
        out.append(
            Experience(
                eid=_eid(level, gi, j),
                tokens=torch.randint(1, 20, (prompt + response,), generator=g),
                prompt_length=prompt,
                logprobs=-_uniform(g, (response,), 0.05, 3.0),
                action_mask=mask,
                reward=float(rewards[gi][j]),
            )
        )
    return out
