"""Checks of policy losses: ``loss(logprob=..., **batch[select_keys]) -> (loss, metrics)``.

The kit passes the inputs under the backend's names (``select_keys``, verl by default), as the trainer
does; gradients must reach ``logprob``. Micro-batch and rank invariance (checks ``microbatch_invariant``
and ``rank_invariant``): see :mod:`trinity_core.testing._invariance`; a loss that is not invariant by
design declares ``microbatch_invariant = False``.
"""

from __future__ import annotations

from typing import Any

from trinity_core.testing import _distributed, _invariance, _loss
from trinity_core.testing._core import (
    ConformanceError,
    Subject,
    all_checks,
    check,
    failed_precondition,
    opt_outs,
    skip_check,
)
from trinity_core.testing.common import BUILT

__all__ = ["PROBE"]


def _needs(instance: Any) -> list[str]:
    return ["logprob", *(instance.mapper.to_trinity(key) for key in instance.select_keys)]


def _invoke(instance: Any, inputs: dict[str, Any], extra: tuple[str, ...]) -> Any:
    batch = {key: inputs[instance.mapper.to_trinity(key)] for key in instance.select_keys}
    return instance(logprob=inputs["logprob"], **batch)


PROBE = _loss.LossProbe("policy loss __call__", _invoke, _needs)
"""How the kit calls a policy loss."""


@check("policy_loss", requires=BUILT)
def check_loss_is_finite(subject: Subject) -> None:
    """the loss is a finite 0-d tensor on random inputs"""
    _loss.check_finite(subject, PROBE)


@check("policy_loss", requires=BUILT)
def check_loss_is_differentiable(subject: Subject) -> None:
    """the gradient reaches logprob and is finite"""
    _loss.check_differentiable(subject, PROBE)


@check("policy_loss", requires=BUILT)
def check_masked_positions_ignored(subject: Subject) -> None:
    """NaN/inf at masked positions change neither loss, metrics nor gradient"""
    _loss.check_masked_ignored(subject, PROBE)


@check("policy_loss", requires=BUILT)
def check_metrics_are_detached_scalars(subject: Subject) -> None:
    """metrics are detached 0-d tensors"""
    _loss.check_detached_metrics(subject, PROBE)


@check("policy_loss", requires=BUILT)
def check_no_host_sync(subject: Subject) -> None:
    """the loss call makes no host synchronisation"""
    _loss.check_no_host_sync(subject, PROBE)


_INVARIANCE_FIX = (
    "aggregate with self.aggregate(values, mask) (it divides by the step's global counts from "
    "loss_scale=) and compute per-token or per-row terms only; a term built from statistics of the "
    "call's rows changes with the split: if that is intended, declare `microbatch_invariant = False` on "
    "the class and explain it in the docstring"
)


def _declared_variant(subject: Subject, check_name: str) -> None:
    if not getattr(subject.obj, "microbatch_invariant", True):
        skip_check(
            subject,
            check_name,
            "it declares microbatch_invariant = False (its loss depends on how a step is split)",
        )


@check("policy_loss", requires=BUILT)
def check_microbatch_invariant(subject: Subject) -> None:
    """2 micro-batches with global normalizers give the whole-batch gradient (1e-6 relative)"""
    _declared_variant(subject, "microbatch_invariant")
    for mode in _invariance.agg_modes(subject.obj):
        instance = _invariance.build(subject.obj, subject.args, mode)
        for seed in _invariance.SEEDS:
            inputs = _invariance.invariance_inputs(subject.obj, seed)
            rows = inputs["action_mask"].shape[0]
            cut = _invariance.split_point(rows)
            whole = _invariance.part_gradient(subject.obj, instance, inputs, [slice(0, rows)])
            split = _invariance.part_gradient(
                subject.obj, instance, inputs, [slice(0, cut), slice(cut, rows)]
            )
            diff = _invariance.compare(whole, split)
            if diff is not None:
                raise ConformanceError(
                    f"with loss_agg_mode={mode} (seed {seed}, {rows} rows, row "
                    f"{_invariance.EMPTY_ROW} empty), the sum of the losses of rows [0, {cut}) and "
                    f"[{cut}, {rows}), each called with loss_scale=global_normalizers([mask_a, mask_b]), "
                    f"has another gradient than the whole batch with "
                    f"loss_scale=global_normalizers([mask]): {diff}",
                    _INVARIANCE_FIX,
                )


def _locate(subject: Subject) -> _invariance.LossSpec | str:
    """How a child process finds the subject's class, or why it cannot."""
    key = f"{subject.kind}:{subject.name}"
    if subject.distribution not in ("<in-process>", "<unregistered>"):
        return _invariance.LossSpec(key, subject.name, None, dict(subject.args))
    obj = subject.obj
    module, qualname = getattr(obj, "__module__", ""), getattr(obj, "__qualname__", "")
    try:
        found = _invariance.load_class(_invariance.LossSpec(key, subject.name, f"{module}:{qualname}"))
    except Exception:
        found = None
    if found is not obj or module == "__main__" or "<locals>" in qualname:
        return (
            f"{module}:{qualname} cannot be imported by name in a new process (defined in __main__ or "
            f"inside a function); define the class at the top level of an importable module"
        )
    return _invariance.LossSpec(key, subject.name, f"{module}:{qualname}", dict(subject.args))


def _rank_subjects(subject: Subject) -> list[Subject]:
    """The losses of the test class that the 2-rank run checks: those whose rank_invariant would run
    (not declared variant, not opted out, preconditions passed: a loss that cannot be built, or whose
    name clashes, would fail in the children for a reason its own checks already report)."""
    chk = next(c for c in all_checks() if c.name == "rank_invariant")
    return [
        s
        for s in subject.peers
        if s.kind == "policy_loss"
        and getattr(s.obj, "microbatch_invariant", True)
        and "rank_invariant" not in opt_outs(s.obj)
        and failed_precondition(s, chk) is None
    ]


@check("policy_loss", requires=(*BUILT, "name_is_unique"))
def check_rank_invariant(subject: Subject) -> None:
    """2 gloo ranks (all-reduced normalizers, DDP-averaged gradients) give the whole-batch gradient"""
    _declared_variant(subject, "rank_invariant")
    located = _locate(subject)
    if isinstance(located, str):
        skip_check(subject, "rank_invariant", located)
    cache = subject.group.results if subject.group is not None else {}
    if "rank_invariant" not in cache:
        # Every loss of the test class in one start of the 2 processes.
        specs = [s for s in map(_locate, _rank_subjects(subject)) if not isinstance(s, str)]
        try:
            cache["rank_invariant"] = _distributed.run_ranks(specs)
        except RuntimeError as exc:
            cache["rank_invariant"] = exc
    result = cache["rank_invariant"]
    if isinstance(result, RuntimeError):
        raise ConformanceError(
            f"{result}",
            "the losses are rebuilt in 2 spawned processes from their registered names; make the "
            "plugin importable there (no state set up only by the test module)",
        )
    assert not isinstance(located, str)
    problems = result.get(located.key, [])
    if problems:
        raise ConformanceError(
            "on 2 gloo ranks (rows [0, cut) and [cut, B) with normalizers all-reduced, gradients "
            "averaged as DDP does) the gradient differs from the whole batch's:\n" + "\n".join(problems),
            _INVARIANCE_FIX,
        )
