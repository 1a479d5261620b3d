"""Checks of group computations: group advantage functions and group add strategies.

They apply to classes built on :class:`~trinity_core.components.GroupComputation` (``GroupAdvantage``,
``GroupAdvantageStrategy``); advantage functions that run in the trainer get the common checks only.
Inputs: 3 groups of 4 experiences at the component's ``group_level``, seeded rewards. Results are
compared per experience (``eid.uid``), on ``exp.advantages``.

Zero-variance groups: by default every member of a group whose rewards are all equal gets an advantage
of exactly 0. A component with another documented policy declares it on the class::

    zero_variance_policy = "drop"    # the group is filtered out
    zero_variance_policy = "finite"  # some other finite value; say which in the docstring
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.components import GroupComputation
from trinity_core.experience import Experience
from trinity_core.testing._core import ConformanceError, Subject, check
from trinity_core.testing._inputs import GROUP_SIZE, group_experiences
from trinity_core.testing.common import BUILT, runtime_objects

__all__ = ["ZERO_VARIANCE_POLICIES", "is_group_computation"]

ZERO_VARIANCE_POLICIES = ("zero", "drop", "finite")
"""Allowed values of ``zero_variance_policy`` (default ``"zero"``)."""

NUM_GROUPS = 3
SEED = 7
RTOL, ATOL = 1e-5, 1e-6

Results = dict[str, list[Tensor]]
"""uid -> advantages of each output experience with that uid (duplicates allowed)."""


def is_group_computation(subject: Subject) -> bool:
    """Whether the subject computes per group (a :class:`GroupComputation`)."""
    return isinstance(subject.obj, type) and issubclass(subject.obj, GroupComputation)


def _rewards(seed: int) -> list[list[float]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((NUM_GROUPS, GROUP_SIZE), generator=g, dtype=torch.float64).round(decimals=3).tolist()


def _level(subject: Subject) -> str:
    return str(getattr(subject.obj, "group_level", "task"))


def _run(
    subject: Subject,
    rewards: Sequence[Sequence[float]],
    *,
    order: Sequence[tuple[int, int]] | None = None,
    path: Callable[[Any, list[Experience]], Any] | None = None,
) -> tuple[list[Experience], Any]:
    instance = subject.build(**runtime_objects(subject))
    exps = group_experiences(rewards, seed=SEED, level=_level(subject), order=order)
    result = (path or _default_path)(instance, exps)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list)):
        raise ConformanceError(
            f"processing returned {type(result).__name__}, not (list of experiences, metrics)",
            "return (kept experiences, metrics dict) from process / calculate_group_advantage",
        )
    return result[0], result[1]


def _default_path(instance: Any, exps: list[Experience]) -> Any:
    return instance.process(exps)


def _results(kept: list[Experience]) -> Results:
    out: Results = {}
    for exp in kept:
        if not isinstance(exp, Experience):
            raise ConformanceError(
                f"the output contains {type(exp).__name__}, not Experience",
                "return the (kept) Experience objects",
            )
        if not isinstance(exp.advantages, Tensor):
            raise ConformanceError(
                f"experience {exp.eid.uid} has advantages={exp.advantages!r}",
                "set exp.advantages (response-aligned tensor) on every kept experience, "
                "e.g. with trinity_core.components.write_advantages",
            )
        out.setdefault(exp.eid.uid, []).append(exp.advantages.detach().to(torch.float64))
    return out


def _suffix(group: int, member: int) -> str:
    return f"kit{group}x{member}"


def _in_group(uid: str, group: int) -> bool:
    return uid.endswith(tuple("/" + _suffix(group, j) for j in range(GROUP_SIZE)))


def _same(a: list[Tensor], b: list[Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and bool(torch.allclose(x, y, rtol=RTOL, atol=ATOL))
        for x, y in zip(a, b, strict=True)
    )


def _preview(values: list[Tensor]) -> str:
    return ", ".join(str([round(v, 5) for v in t.flatten()[:4].tolist()]) for t in values[:2])


@check("advantage_fn", "add_strategy", applies=is_group_computation, requires=BUILT)
def check_advantages_are_finite(subject: Subject) -> None:
    """every kept experience gets finite advantages"""
    kept, metrics = _run(subject, _rewards(SEED))
    if not isinstance(metrics, dict):
        raise ConformanceError(f"metrics are {type(metrics).__name__}, not a dict", "return a metrics dict")
    for uid, values in _results(kept).items():
        if not all(bool(torch.isfinite(v).all()) for v in values):
            raise ConformanceError(
                f"experience {uid} got non-finite advantages [{_preview(values)}]",
                "guard divisions by the group std (add epsilon / handle a zero std explicitly)",
            )


@check("advantage_fn", "add_strategy", applies=is_group_computation, requires=BUILT)
def check_groups_are_independent(subject: Subject) -> None:
    """changing one group's rewards leaves every other group's advantages unchanged"""
    base = _rewards(SEED)
    changed = [list(row) for row in base]
    changed[1] = _rewards(SEED + 1)[1]
    before = _results(_run(subject, base)[0])
    after = _results(_run(subject, changed)[0])
    for uid in sorted(set(before) | set(after)):
        if _in_group(uid, 1):
            continue
        if not _same(before.get(uid, []), after.get(uid, [])):
            raise ConformanceError(
                f"changing the rewards of group 1 changed the output for experience {uid} of another "
                f"group: [{_preview(before.get(uid, []))}] -> [{_preview(after.get(uid, []))}]",
                "compute statistics per group only (group_experiences / batch.group_index); a batch-wide "
                "statistic must be an opt-in argument, off by default",
            )


@check("advantage_fn", "add_strategy", applies=is_group_computation, requires=BUILT)
def check_permutation_equivariant(subject: Subject) -> None:
    """reordering the members of a group reorders, not changes, their advantages"""
    rewards = _rewards(SEED)
    forward = [(g, j) for g in range(NUM_GROUPS) for j in range(GROUP_SIZE)]
    permuted = [(g, j) for g in range(NUM_GROUPS) for j in (2, 0, 3, 1)]
    before = _results(_run(subject, rewards, order=forward)[0])
    after = _results(_run(subject, rewards, order=permuted)[0])
    if set(before) != set(after):
        raise ConformanceError(
            f"reordering group members changed which experiences are kept: "
            f"{sorted(set(before) ^ set(after))}",
            "decide per experience from its reward and its group's statistics, not from its position",
        )
    for uid, values in before.items():
        if not _same(values, after[uid]):
            raise ConformanceError(
                f"reordering the members of its group changed experience {uid}'s advantages: "
                f"[{_preview(values)}] -> [{_preview(after[uid])}]",
                "compute from order-independent group statistics (mean, std, ranks with ties handled)",
            )


@check("advantage_fn", "add_strategy", applies=is_group_computation, requires=BUILT)
def check_zero_variance_group(subject: Subject) -> None:
    """a group with equal rewards gets exactly 0 (or the declared zero_variance_policy)"""
    policy = getattr(subject.obj, "zero_variance_policy", "zero")
    if policy not in ZERO_VARIANCE_POLICIES:
        raise ConformanceError(
            f"zero_variance_policy is {policy!r}",
            f"use one of {', '.join(ZERO_VARIANCE_POLICIES)} and document it in the class docstring",
        )
    rewards = _rewards(SEED)
    rewards[0] = [0.5] * GROUP_SIZE
    results = _results(_run(subject, rewards)[0])
    group = {uid: values for uid, values in results.items() if _in_group(uid, 0)}
    if policy == "drop":
        if group:
            raise ConformanceError(
                f"zero_variance_policy is 'drop' but the zero-variance group was kept ({sorted(group)})",
                "drop the group, or declare the policy it follows",
            )
        return
    if not group:
        raise ConformanceError(
            "the zero-variance group was dropped",
            "keep it with zero advantages, or declare zero_variance_policy = 'drop'",
        )
    for uid, values in group.items():
        if not all(bool(torch.isfinite(v).all()) for v in values):
            raise ConformanceError(
                f"experience {uid} of the zero-variance group got non-finite advantages [{_preview(values)}]",
                "handle std == 0 explicitly (e.g. torch.where(std > 0, (r - mean) / std, 0))",
            )
        if policy == "zero" and any(bool(v.any()) for v in values):
            raise ConformanceError(
                f"experience {uid} of a group whose rewards are all 0.5 got advantages [{_preview(values)}], "
                f"not exactly 0",
                "compute deviations from the group mean in float64 so that equal rewards give exactly 0 "
                "(trinity_core.ops.group_stats), or declare zero_variance_policy = 'finite' and document it",
            )


def _supports_batch(subject: Subject) -> bool:
    return is_group_computation(subject) and bool(getattr(subject.obj, "supports_batch", False))


@check("advantage_fn", "add_strategy", applies=_supports_batch, requires=BUILT)
def check_vectorized_matches_per_group(subject: Subject) -> None:
    """process_batch (vectorized) and calculate_group_advantage (per group) give the same result"""
    rewards = _rewards(SEED)
    rewards[2] = [1.0] * GROUP_SIZE
    vec_kept, vec_metrics = _run(subject, rewards, path=lambda inst, exps: inst.process_vectorized(exps))
    ref_kept, ref_metrics = _run(subject, rewards, path=lambda inst, exps: inst.process_per_group(exps))
    vec_order = [e.eid.uid for e in vec_kept]
    ref_order = [e.eid.uid for e in ref_kept]
    if vec_order != ref_order:
        raise ConformanceError(
            f"the vectorized path keeps {vec_order} but the per-group path keeps {ref_order}",
            "keep the same experiences in the same order (grouped, groups in first-appearance order)",
        )
    vec, ref = _results(vec_kept), _results(ref_kept)
    for uid, values in ref.items():
        if not _same(values, vec[uid]):
            raise ConformanceError(
                f"experience {uid}: per-group advantages [{_preview(values)}] but vectorized "
                f"[{_preview(vec[uid])}]",
                "make process_batch compute exactly what calculate_group_advantage computes",
            )
    if set(vec_metrics) != set(ref_metrics):
        raise ConformanceError(
            f"metric keys differ: vectorized {sorted(vec_metrics)} vs per-group {sorted(ref_metrics)}",
            "report the same metrics from both paths (summarize_metric mirrors aggregate_metrics)",
        )
    for key, value in ref_metrics.items():
        a = torch.as_tensor(value, dtype=torch.float64)
        b = torch.as_tensor(vec_metrics[key], dtype=torch.float64)
        if not bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)):
            raise ConformanceError(
                f"metric {key!r}: per-group {a.tolist()} vs vectorized {b.tolist()}",
                "compute the metric identically in both paths",
            )
