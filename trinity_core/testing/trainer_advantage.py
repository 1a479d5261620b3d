"""Checks of advantage functions that run in the trainer (:class:`~trinity_core.components.TrainerAdvantage`).

Input: an :class:`~trinity_core.batch.ExperienceBatch` of 3 groups of 4 experiences at the class's
``group_level`` (``"task"`` when it has none), one group with equal rewards, plus every column its
``required_fields`` names: experience fields (``logprobs``, ``teacher_logprobs``, ...) are set on the
batch, anything else goes into ``batch.extras`` as a seeded random ``(N, R)`` tensor (log-probs negative,
``entropys`` positive, ``reward_baselines`` ``(N,)``, others standard normal). A function that needs a
column of another shape declares ``conformance_columns(cls, batch) -> dict[str, Tensor]`` on its class.

Group independence is checked unless the class declares ``groups_independent = False`` (a batch-wide
statistic, e.g. whitening over every token of the batch, couples the groups).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import BATCH_RESPONSE_FIELDS, ExperienceBatch
from trinity_core.components import TrainerAdvantage
from trinity_core.testing._core import ConformanceError, Subject, check, skip_check
from trinity_core.testing._inputs import GROUP_SIZE, group_experiences
from trinity_core.testing.common import BUILT
from trinity_core.testing.host_syncs import count_host_syncs

__all__ = ["COLUMNS_HOOK", "INDEPENDENCE_ATTRIBUTE", "is_trainer_advantage", "trainer_batch"]

COLUMNS_HOOK = "conformance_columns"
"""Class attribute: ``conformance_columns(batch) -> {name: tensor}`` adds columns to ``batch.extras``."""

INDEPENDENCE_ATTRIBUTE = "groups_independent"
"""Class attribute: False when the advantages of a group depend on other groups (batch statistics)."""

NUM_GROUPS = 3
SEED = 11
RTOL, ATOL = 1e-5, 1e-6
_ALWAYS_THERE = {"reward", "action_mask", "advantages", "returns"}


def is_trainer_advantage(subject: Subject) -> bool:
    """Whether the subject is an advantage function computed in the trainer on the batch."""
    return isinstance(subject.obj, type) and issubclass(subject.obj, TrainerAdvantage)


def _rewards(seed: int) -> list[list[float]]:
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn((NUM_GROUPS, GROUP_SIZE), generator=g, dtype=torch.float64).round(decimals=3)
    rows[2] = 0.5  # a zero-variance group
    return rows.tolist()


def _column(name: str, shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    if "logprob" in name:
        return -(torch.rand(shape, generator=g) * 2.95 + 0.05)
    if "entrop" in name:
        return torch.rand(shape, generator=g) * 2.9 + 0.1
    return torch.randn(shape, generator=g)


def trainer_batch(cls: Any, rewards: list[list[float]]) -> ExperienceBatch:
    """The batch for ``cls`` (see the module docstring); columns depend on the seed only, not on the
    rewards, so two batches with different rewards differ in nothing else."""
    level = str(getattr(cls, "group_level", "task"))
    exps = group_experiences(rewards, seed=SEED, level=level)
    batch = ExperienceBatch.from_experiences(exps)
    n, width = len(batch), batch.max_response_length
    g = torch.Generator().manual_seed(SEED)
    for name in getattr(cls, "required_fields", ()):
        if name in _ALWAYS_THERE:
            continue
        if name in BATCH_RESPONSE_FIELDS:
            if getattr(batch, name) is None:
                setattr(batch, name, _column(name, (n, width), g))
        elif name == "reward_baselines":
            batch.extras[name] = torch.randn((n,), generator=g)
        else:
            batch.extras[name] = _column(name, (n, width), g)
    hook = getattr(cls, COLUMNS_HOOK, None)
    if callable(hook):
        more = hook(batch)
        if not isinstance(more, Mapping):
            raise ConformanceError(
                f"{COLUMNS_HOOK} returned {more!r}, not a dict", "return {'<column>': tensor}"
            )
        batch.extras.update(more)
    return batch


def _compute(subject: Subject, rewards: list[list[float]]) -> tuple[ExperienceBatch, Tensor, Tensor, Any]:
    instance = subject.build()
    batch = trainer_batch(subject.obj, rewards)
    result = instance(batch)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ConformanceError(
            f"calling it returned {type(result).__name__}, not (batch, metrics)",
            "implement compute(batch) and keep TrainerAdvantage.__call__",
        )
    out, metrics = result
    advantages = getattr(out, "advantages", None)
    returns = getattr(out, "returns", None)
    for name, value in (("advantages", advantages), ("returns", returns)):
        if not isinstance(value, Tensor):
            raise ConformanceError(
                f"after the call batch.{name} is {type(value).__name__}, not a tensor",
                "return (advantages, returns, metrics) from compute(batch), both (N, R) tensors",
            )
    assert isinstance(advantages, Tensor)
    assert isinstance(returns, Tensor)
    return batch, advantages, returns, metrics


def _mask(batch: ExperienceBatch) -> Tensor:
    mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
    return mask.bool()


@check("advantage_fn", applies=is_trainer_advantage, requires=BUILT)
def check_trainer_advantages_are_finite(subject: Subject) -> None:
    """advantages and returns are finite (N, R) tensors, 0 outside the response mask; metrics a dict"""
    batch, advantages, returns, metrics = _compute(subject, _rewards(SEED))
    n, width = len(batch), batch.max_response_length
    mask = _mask(batch)
    if not isinstance(metrics, dict):
        raise ConformanceError(f"metrics are {type(metrics).__name__}, not a dict", "return a metrics dict")
    for name, value in (("advantages", advantages), ("returns", returns)):
        if value.shape != (n, width) or not value.is_floating_point():
            raise ConformanceError(
                f"{name} is a {value.dtype} tensor of shape {tuple(value.shape)}, not float ({n}, {width}) "
                f"(N experiences, R = longest response)",
                "return one value per response token: (N, R) like batch.response_mask",
            )
        if not bool(torch.isfinite(value).all()):
            rows = torch.nonzero(~torch.isfinite(value).all(dim=-1)).flatten().tolist()
            raise ConformanceError(
                f"{name} has non-finite entries in rows {rows} (a zero-variance group is rows 8-11)",
                "guard divisions (std of a group or of the batch can be 0) and log/exp of extreme values",
            )
        outside = value.detach()[~mask]
        if bool((outside != 0).any()):
            raise ConformanceError(
                f"{name} is not 0 outside the response mask (e.g. {outside[outside != 0][:4].tolist()})",
                "zero masked positions: torch.where(mask, value, 0) (TrainerAdvantage.__call__ does it)",
            )


def _differs(a: Tensor, b: Tensor) -> bool:
    return not bool(torch.allclose(a.double(), b.double(), rtol=RTOL, atol=ATOL, equal_nan=True))


@check("advantage_fn", applies=is_trainer_advantage, requires=BUILT)
def check_trainer_groups_are_independent(subject: Subject) -> None:
    """changing one group's rewards leaves every other group's advantages unchanged"""
    if getattr(subject.obj, INDEPENDENCE_ATTRIBUTE, True) is False:
        skip_check(
            subject,
            "trainer_groups_are_independent",
            f"it declares {INDEPENDENCE_ATTRIBUTE} = False (a batch-wide statistic couples the groups)",
        )
    base = _rewards(SEED)
    changed = [list(row) for row in base]
    changed[1] = _rewards(SEED + 1)[1]
    batch, adv_a, ret_a, _ = _compute(subject, base)
    _, adv_b, ret_b, _ = _compute(subject, changed)
    level = str(getattr(subject.obj, "group_level", "task"))
    other = batch.group_index[level] != 1
    for name, a, b in (("advantages", adv_a, adv_b), ("returns", ret_a, ret_b)):
        if _differs(a[other], b[other]):
            rows = torch.nonzero(other).flatten()
            moved = [int(r) for r in rows if _differs(a[r], b[r])]
            raise ConformanceError(
                f"changing the rewards of group 1 (rows 4-7) changed the {name} of rows {moved} in other "
                f"groups",
                f"compute statistics per group (batch.group_index); if a batch-wide statistic (e.g. "
                f"whitening over the batch) is intended, declare `{INDEPENDENCE_ATTRIBUTE} = False` on the "
                f"class and say so in its docstring",
            )


@check("advantage_fn", applies=is_trainer_advantage, requires=BUILT)
def check_trainer_no_host_sync(subject: Subject) -> None:
    """the call makes no host synchronisation (.item(), .tolist(), .cpu(), bool(tensor), ...)"""
    instance = subject.build()
    batch = trainer_batch(subject.obj, _rewards(SEED))
    with count_host_syncs() as log:
        instance(batch)
    if len(log):
        raise ConformanceError(
            f"the call made {len(log)} host synchronisation(s):\n{log.describe()}",
            "keep values on the device: torch.where / clamp instead of Python `if` on tensors, group "
            "sizes from batch.num_groups (a Python int), metrics as 0-d tensors, never .item()/.tolist()",
        )
