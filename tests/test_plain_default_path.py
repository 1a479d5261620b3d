"""The default path of every installed loss, KL function, advantage function and add strategy is plain
torch: called with its default arguments it makes no call into ``trinity_core.ops.fast`` or
``trinity_core.ops.fused``, forward or backward. The speed kernels there are opt-in (``fused=True``).

A profile hook (``sys.setprofile``) records every Python function entered while a component runs whose
code lives in one of those two modules, so a kernel reached through any import (``from ... import
as_float``), an ``autograd.Function``'s backward or a compiled kernel's wrapper is seen. In the core env
no plugin is installed and only the controls run; the ``all`` env has every shipped plugin.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
import torch

from trinity_core import registry
from trinity_core.batch import ExperienceBatch
from trinity_core.components import GroupComputation, StandardPolicyLossFn, TrainerAdvantage
from trinity_core.ops import PolicyInputs, fast, fused
from trinity_core.testing import _loss, entropy_loss, kl_fn, policy_loss, value_loss
from trinity_core.testing._core import Subject
from trinity_core.testing._inputs import GROUP_SIZE, group_experiences
from trinity_core.testing.common import runtime_objects
from trinity_core.testing.trainer_advantage import trainer_batch

KERNEL_MODULES = {os.path.realpath(m.__file__): m.__name__ for m in (fast, fused) if m.__file__}
"""The files of the opt-in kernels, by module name."""

KINDS = ("policy_loss", "kl_fn", "entropy_loss", "value_loss", "advantage_fn", "add_strategy")


@contextmanager
def kernel_calls() -> Iterator[list[str]]:
    """Yield a list that collects ``module.function`` for every call into :data:`KERNEL_MODULES`."""
    calls: list[str] = []
    seen: dict[str, str | None] = {}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        filename = frame.f_code.co_filename
        if filename not in seen:
            seen[filename] = KERNEL_MODULES.get(os.path.realpath(filename))
        module = seen[filename]
        if module is not None:
            calls.append(f"{module}.{frame.f_code.co_qualname}")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)


def _installed(kind: str) -> list[Subject]:
    return [
        Subject(kind, rec.name, rec.obj, rec.distribution, rec.version, rec.value)
        for rec in registry.list_components(kind, strict=False)
        if rec.obj is not None
    ]


SUBJECTS = [subject for kind in KINDS for subject in _installed(kind)]


PROBES: dict[str, tuple[_loss.LossProbe, ...]] = {
    "policy_loss": (policy_loss.PROBE,),
    "kl_fn": (kl_fn.LOSS_PROBE, kl_fn.PENALTY_PROBE),
    "entropy_loss": (entropy_loss.PROBE,),
    "value_loss": (value_loss.PROBE,),
}
"""The kit's calls of each loss-like kind (a KL function has two paths: the loss and the penalty)."""

REWARDS = [[(3 * g + j) % 5 / 4 for j in range(GROUP_SIZE)] for g in range(3)]
"""Three groups of distinct rewards (none zero-variance)."""


def _run_loss(subject: Subject, probe: _loss.LossProbe) -> None:
    """Build with default args, call with the kit's inputs, and back-propagate when it is a loss."""
    prep = _loss._prepare(subject, probe, seed=0)
    output, _, leaves = _loss._call(probe, prep, prep.inputs)
    if leaves and output.requires_grad:
        output.backward()


def _experiences(subject: Subject) -> list[Any]:
    return group_experiences(REWARDS, seed=5, level=str(getattr(subject.obj, "group_level", "task")))


def run_default_path(subject: Subject) -> None:
    """Run ``subject`` built with its default arguments the way the trainer does: every loss path with
    backward; a group computation's ``process`` (or an add strategy's ``add``) and, when it has one, its
    columnar ``process_batch``; a trainer advantage on a batch."""
    obj = subject.obj
    if subject.kind in PROBES:
        for probe in PROBES[subject.kind]:
            _run_loss(subject, probe)
    elif subject.kind == "add_strategy":
        strategy = subject.build(**runtime_objects(subject))
        asyncio.run(strategy.add(_experiences(subject), 1))
        if isinstance(strategy, GroupComputation) and strategy.supports_batch:
            strategy.process_batch(ExperienceBatch.from_experiences(_experiences(subject)))
    elif isinstance(obj, type) and issubclass(obj, GroupComputation):
        instance = subject.build()
        instance.process(_experiences(subject))
        if instance.supports_batch:
            instance.process_batch(ExperienceBatch.from_experiences(_experiences(subject)))
    elif isinstance(obj, type) and issubclass(obj, TrainerAdvantage):
        subject.build()(trainer_batch(obj, REWARDS))
    else:
        raise AssertionError(f"{subject.describe()}: no way to run its default path here; add one")


@pytest.mark.parametrize("subject", SUBJECTS, ids=[f"{s.kind}:{s.name}" for s in SUBJECTS])
def test_default_path_makes_no_call_into_the_speed_kernels(subject: Subject) -> None:
    with kernel_calls() as calls:
        run_default_path(subject)
    assert not calls, (
        f"{subject.describe()} with its default arguments calls {sorted(set(calls))}; the default path must "
        "be plain torch (the formula, torch.where, autograd): put speed kernels behind fused=True"
    )


def test_the_check_sees_kernel_calls_forward_and_backward() -> None:
    # Control: a direct call, a call through a name imported elsewhere, and an autograd.Function's
    # backward are all recorded; plain torch is not.
    x = torch.randn(3, 4, requires_grad=True)
    mask = torch.rand(3, 4) < 0.5
    with kernel_calls() as calls:
        torch.where(mask, x, 0.0).sum().backward()
    assert calls == []
    with kernel_calls() as calls:
        fast.row_sums(x.detach(), mask, torch.float64)
    assert "trinity_core.ops.fast.row_sums" in calls
    with kernel_calls() as calls:
        rows = fused.rows_with_gradient(x, torch.zeros(3), torch.ones(3, 4))
        calls_before_backward = list(calls)
        rows.sum().backward()
    assert "trinity_core.ops.fused.rows_with_gradient" in calls_before_backward
    assert "trinity_core.ops.fused._RowsWithGradient.backward" in calls


class _KernelByDefault(StandardPolicyLossFn):
    """A loss whose default path uses a speed kernel: what the test must refuse."""

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        per_token = -inputs.advantages * inputs.ratio * fast.as_float(inputs.mask, inputs.dtype)
        loss = self.aggregate(per_token, inputs.mask)
        return loss, {"pg_loss": loss.detach()}


def test_a_loss_that_uses_a_kernel_by_default_is_refused() -> None:
    subject = Subject("policy_loss", "kernel_by_default", _KernelByDefault, "<unregistered>")
    with pytest.raises(AssertionError, match=r"calls \['trinity_core.ops.fast.as_float'\]"):
        test_default_path_makes_no_call_into_the_speed_kernels(subject)
