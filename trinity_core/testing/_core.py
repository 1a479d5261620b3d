"""The machinery of the conformance kit: subjects, checks, failures and their messages.

A *subject* is one component class with its provenance (kind, registered name, distribution). A *check*
is a function ``check(subject) -> None`` that raises :class:`ConformanceError` (what is wrong and how to
fix it). Check modules register their checks with :func:`check`; :func:`checks_for` lists the ones that
apply to a subject, and :func:`run_check` runs one and turns any failure into a message that names the
component, its distribution, the check and the fix.

A check may name *preconditions* (``requires=``): checks whose failure makes it meaningless (nothing can
be called on a component whose ``Args`` defaults do not validate). When one fails, the dependent check is
skipped with one reason, ``precondition 'X' failed: see that check``, instead of failing with advice about
something else; only the precondition itself fails.
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

__all__ = [
    "OPT_OUT_ATTRIBUTE",
    "Check",
    "ConformanceError",
    "Subject",
    "SubjectGroup",
    "all_checks",
    "check",
    "check_names",
    "checks_for",
    "failed_precondition",
    "run_check",
    "skip_check",
]

OPT_OUT_ATTRIBUTE = "conformance_skip"
"""Class attribute ``{check name: reason}`` with which a component opts out of checks."""

KIND_TITLES: dict[str, str] = {
    "algorithm": "algorithm",
    "advantage_fn": "advantage function",
    "add_strategy": "add strategy",
    "policy_loss": "policy loss",
    "kl_fn": "KL function",
    "entropy_loss": "entropy loss",
    "value_loss": "value loss",
    "task": "task set",
    "task_selector": "task selector",
    "operator": "experience operator",
    "priority_fn": "priority function",
    "tool_parser": "tool parser",
}


class ConformanceError(AssertionError):
    """A component breaks its contract.

    Args:
        problem: what is wrong, with the observed values.
        fix: what the plugin author should change.
    """

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}\nHow to fix: {fix}")
        self.problem = problem
        self.fix = fix


@dataclass(eq=False)
class SubjectGroup:
    """The subjects one test class checks, shared by them: a check that is expensive to set up (the
    2-rank distributed check starts processes) runs once for all of them and caches its results here.

    Attributes:
        subjects: every subject of the test class, in collection order.
        results: per-check cache, ``{check name: whatever the check stores}``.
    """

    subjects: list[Subject] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Subject:
    """One component under test.

    Attributes:
        kind: the component kind (``"policy_loss"``, ...).
        name: the registered name (the class name for an unregistered class).
        obj: the component class.
        distribution: the distribution that provides it (``"<in-process>"`` for in-process
            registrations, ``"<unregistered>"`` for a class given directly).
        version: that distribution's version ("" when unknown).
        value: where it is defined, ``module:qualname``.
        args: argument overrides the test class asked for (merged over the defaults).
        group: the subjects collected with this one (set by the test classes; ``None`` alone).
    """

    kind: str
    name: str
    obj: Any
    distribution: str
    version: str = ""
    value: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)
    group: SubjectGroup | None = field(default=None, compare=False, repr=False)

    @property
    def peers(self) -> list[Subject]:
        """The subjects of this one's group (just this one when it has none)."""
        return list(self.group.subjects) if self.group is not None else [self]

    @property
    def title(self) -> str:
        """The kind in words (``"policy loss"``)."""
        return KIND_TITLES.get(self.kind, self.kind)

    def describe(self) -> str:
        """``policy loss 'ppo' (pkg.mod:PPO) from trinity-plugin-ppo 0.1.0``."""
        provider = f"{self.distribution} {self.version}".strip()
        where = f" ({self.value})" if self.value else ""
        return f"{self.title} {self.name!r}{where} from {provider}"

    def build(self, **runtime: Any) -> Any:
        """An instance from ``args`` merged over the defaults, plus runtime objects."""
        return self.obj.from_args(dict(self.args), **runtime)


@dataclass(frozen=True)
class Check:
    """One conformance check.

    Attributes:
        name: the check's name, as used in test ids and ``conformance_skip``.
        kinds: the kinds it applies to.
        func: ``func(subject) -> None``; raises :class:`ConformanceError`.
        applies: further restricts the subjects (e.g. only group computations).
        skippable: whether ``conformance_skip`` may name it.
        requires: names of the checks that must pass first (see :func:`failed_precondition`).
    """

    name: str
    kinds: tuple[str, ...]
    func: Callable[[Subject], None]
    applies: Callable[[Subject], bool] | None = None
    skippable: bool = True
    requires: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """The first paragraph of the check function's docstring, on one line (never cut mid-phrase)."""
        first = inspect.cleandoc(self.func.__doc__ or "").split("\n\n", 1)[0]
        return " ".join(first.split()) or self.name

    def applies_to(self, subject: Subject) -> bool:
        """Whether this check runs for ``subject``."""
        return subject.kind in self.kinds and (self.applies is None or self.applies(subject))


_CHECKS: dict[str, Check] = {}


def check(
    *kinds: str,
    applies: Callable[[Subject], bool] | None = None,
    skippable: bool = True,
    requires: tuple[str, ...] = (),
) -> Callable[[Callable[[Subject], None]], Callable[[Subject], None]]:
    """Register the decorated function as a check of ``kinds`` (its name is the function name minus
    a ``check_`` prefix); ``requires`` names the checks it depends on (its preconditions)."""

    def decorate(func: Callable[[Subject], None]) -> Callable[[Subject], None]:
        name = func.__name__.removeprefix("check_")
        previous = _CHECKS.get(name)
        # A module imported again (pytester restores sys.modules between runs) redefines its own checks.
        if previous is not None and previous.func.__module__ != func.__module__:
            raise ValueError(
                f"conformance check {name!r} is defined in {previous.func.__module__} and {func.__module__}"
            )
        _CHECKS[name] = Check(name, tuple(kinds), func, applies, skippable, tuple(requires))
        return func

    return decorate


_CHECK_MODULES = (
    "common",
    "policy_loss",
    "kl_fn",
    "entropy_loss",
    "value_loss",
    "advantage_fn",
    "trainer_advantage",
    "add_strategy",
    "algorithm",
    "workflow",
    "task",
    "task_selector",
    "experience_operator",
    "priority_fn",
    "tool_parser",
)


def _load_check_modules() -> None:
    # Checks register themselves when their module is imported; this order is the report order.
    for module in _CHECK_MODULES:
        importlib.import_module(f"trinity_core.testing.{module}")


def all_checks() -> list[Check]:
    """Every registered check, in registration order."""
    _load_check_modules()
    return list(_CHECKS.values())


def check_names(kind: str) -> list[str]:
    """Names of the checks defined for ``kind``."""
    return [c.name for c in all_checks() if kind in c.kinds]


def checks_for(subject: Subject) -> list[Check]:
    """The checks that apply to ``subject``."""
    return [c for c in all_checks() if c.applies_to(subject)]


def opt_outs(obj: Any) -> dict[str, Any]:
    """The component's ``conformance_skip`` declaration (``{}`` when absent)."""
    declared = getattr(obj, OPT_OUT_ATTRIBUTE, None)
    return dict(declared) if isinstance(declared, Mapping) else {}


def _precondition_problem(subject: Subject, pre: Check) -> str | None:
    """Why ``pre`` fails for ``subject`` (the first line of its problem), or None when it passes or
    skips; cached in the subject's group, so a precondition runs once however many checks need it."""
    cache = subject.group.results if subject.group is not None else {}
    key = f"precondition:{id(subject)}:{pre.name}"
    if key not in cache:
        problem: str | None = None
        try:
            pre.func(subject)
        except pytest.skip.Exception:
            problem = None  # it does not apply to this component; nothing depends on it failing
        except ConformanceError as exc:
            problem = exc.problem
        except Exception as exc:
            problem = f"calling the component raised {type(exc).__name__}: {exc}"
        cache[key] = problem
    found: str | None = cache[key]
    return None if found is None else (found.strip().splitlines() or [""])[0]


def failed_precondition(subject: Subject, chk: Check) -> tuple[str, str] | None:
    """The first precondition of ``chk`` that fails for ``subject`` (the root cause first: a failing
    precondition of a precondition is reported as itself), as ``(check name, its problem)``; None when
    all pass. A precondition that does not apply to the subject, or that it opts out of, does not count."""
    reasons = opt_outs(subject.obj)
    for name in chk.requires:
        pre = _CHECKS.get(name)
        if pre is None or not pre.applies_to(subject) or (pre.skippable and name in reasons):
            continue
        deeper = failed_precondition(subject, pre)
        if deeper is not None:
            return deeper
        problem = _precondition_problem(subject, pre)
        if problem is not None:
            return name, problem
    return None


def run_check(subject: Subject, chk: Check) -> None:
    """Run ``chk`` on ``subject`` inside a test: skip when the component opted out or a precondition
    failed (with that one reason), fail with a message naming the component, its distribution, the check
    and the fix."""
    reasons = opt_outs(subject.obj)
    if chk.skippable and chk.name in reasons:
        pytest.skip(f"{subject.describe()} opts out of conformance check {chk.name!r}: {reasons[chk.name]}")
    failed = failed_precondition(subject, chk)
    if failed is not None:
        name, problem = failed
        pytest.skip(
            f"{subject.describe()}: conformance check {chk.name!r} not run: precondition {name!r} failed: "
            f"see that check ({problem})"
        )
    header = f"{subject.describe()} fails conformance check {chk.name!r} ({chk.summary})"
    message = None
    try:
        chk.func(subject)
    except ConformanceError as exc:
        message = f"{header}:\n{exc}{_opt_out_hint(chk)}"
    except Exception as exc:  # the component raised: show its traceback, not the kit's frames
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        message = (
            f"{header}: calling the component raised {type(exc).__name__}: {exc}\n"
            f"How to fix: the kit calls it with valid inputs (see docs/conformance.md); make it accept them."
            f"{_opt_out_hint(chk)}\n{tb}"
        )
    if message is not None:  # failed outside the except block: no "during handling" chain in reports
        pytest.fail(message, pytrace=False)


def skip_check(subject: Subject, check_name: str, reason: str) -> None:
    """Skip ``check_name`` for ``subject`` from inside a check, because of something the component
    declares (a capability such as ``microbatch_invariant = False``) or cannot provide; the reason is
    shown in the report."""
    pytest.skip(f"{subject.describe()} skips conformance check {check_name!r}: {reason}")


def _opt_out_hint(chk: Check) -> str:
    if not chk.skippable:
        return ""
    return (
        f"\n(If the component deliberately differs, declare it on the class: "
        f"{OPT_OUT_ATTRIBUTE} = {{{chk.name!r}: '<reason>'}}.)"
    )
