"""The test classes plugin authors subclass: one per component kind, and one for a whole distribution.

Each class has a single test, ``test_conformance``, parametrized at collection time (by the class's own
``pytest_generate_tests``) with one case per (component, check): test ids read
``policy_loss:ppo:masked_positions_ignored``, so ``-k masked`` selects a check.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from trinity_core.testing._core import Check, Subject, SubjectGroup, checks_for, run_check

__all__ = [
    "AddStrategyConformance",
    "AdvantageFnConformance",
    "AlgorithmConformance",
    "Case",
    "ComponentConformance",
    "EntropyLossConformance",
    "ExperienceOperatorConformance",
    "KLFnConformance",
    "PluginConformance",
    "PolicyLossConformance",
    "PriorityFnConformance",
    "TaskConformance",
    "TaskSelectorConformance",
    "ToolParserConformance",
    "ValueLossConformance",
    "WorkflowConformance",
]

OPTION_DEST = "trinity_plugin"
"""``config.getoption`` name of ``--trinity-plugin`` (see :mod:`trinity_core.testing.plugin`)."""


@dataclass(frozen=True)
class Case:
    """One collected test: a check of a subject, or a problem found while collecting (reported as a
    failing test, so that a broken plugin is never silently skipped)."""

    id: str
    subject: Subject | None = None
    check: Check | None = None
    problem: str | None = None
    runner: Callable[[], None] | None = None

    def run(self) -> None:
        """Run the case inside a test."""
        if self.problem is not None:
            pytest.fail(self.problem, pytrace=False)
        if self.runner is not None:
            self.runner()
        if self.subject is not None and self.check is not None:
            run_check(self.subject, self.check)


def cases_for(subject: Subject) -> list[Case]:
    """One case per check that applies to ``subject``."""
    return [Case(f"{subject.kind}:{subject.name}:{chk.name}", subject, chk) for chk in checks_for(subject)]


def link_subjects(cases: Sequence[Case]) -> list[Case]:
    """Put the subjects of ``cases`` into one :class:`SubjectGroup`, so that checks run once for all of
    them can share their set-up (the 2-rank check starts its processes once per test class)."""
    group = SubjectGroup()
    linked: dict[int, Subject] = {}
    out: list[Case] = []
    for case in cases:
        if case.subject is None:
            out.append(case)
            continue
        subject = linked.get(id(case.subject))
        if subject is None:
            subject = dataclasses.replace(case.subject, group=group)
            linked[id(case.subject)] = subject
            group.subjects.append(subject)
        out.append(dataclasses.replace(case, subject=subject))
    return out


class _Conformance:
    """Collection machinery shared by the test classes (subclasses implement ``_cases``)."""

    @classmethod
    def _cases(cls, config: pytest.Config) -> list[Case]:
        raise NotImplementedError

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize ``test_conformance`` with this class's cases (pytest calls this per class)."""
        if "conformance_case" not in metafunc.fixturenames:
            return
        cases = link_subjects(type(self)._cases(metafunc.config))
        metafunc.parametrize("conformance_case", cases, ids=[c.id for c in cases])

    def test_conformance(self, conformance_case: Case) -> None:
        """Run one conformance check (the id names the kind, the component and the check)."""
        conformance_case.run()


class ComponentConformance(_Conformance):
    """Every check for one component of ``kind``.

    Attributes:
        kind: the component kind (set by the per-kind subclasses).
        component: the registered name (resolved through :mod:`trinity_core.registry`), or the class
            itself (checks a class before it is packaged).
        args: argument overrides, merged per key over the component's defaults.
    """

    kind: ClassVar[str] = ""
    component: ClassVar[str | type | None] = None
    args: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def _cases(cls, config: pytest.Config) -> list[Case]:
        where = f"{cls.__module__}.{cls.__qualname__}"
        if not cls.kind:
            return [Case("setup", problem=f"{where}: set `kind = '<component kind>'` on the class")]
        if cls.component is None:
            return [
                Case(
                    f"{cls.kind}:setup",
                    problem=f"{where}: set `component = '<registered {cls.kind} name>'` on the class",
                )
            ]
        try:
            subject = _subject(cls.kind, cls.component, cls.args)
        except Exception as exc:  # unknown name, conflict, load failure: show the registry's message
            return [Case(f"{cls.kind}:{cls.component}:resolves", problem=f"{where}: {exc}")]
        return cases_for(subject)


def _subject(kind: str, component: str | type, args: Mapping[str, Any]) -> Subject:
    if isinstance(component, type):
        value = f"{component.__module__}:{component.__qualname__}"
        name = getattr(component, "name", None)
        label = name() if callable(name) else component.__name__
        return Subject(kind, str(label), component, "<unregistered>", "", value, dict(args))
    from trinity_core import registry

    rec = registry.record(kind, component)
    return Subject(kind, rec.name, rec.obj, rec.distribution, rec.version, rec.value, dict(args))


class PolicyLossConformance(ComponentConformance):
    """Conformance of one policy loss: ``component = "<name>"``."""

    kind = "policy_loss"


class AdvantageFnConformance(ComponentConformance):
    """Conformance of one advantage function: ``component = "<name>"``."""

    kind = "advantage_fn"


class AddStrategyConformance(ComponentConformance):
    """Conformance of one add strategy: ``component = "<name>"``."""

    kind = "add_strategy"


class KLFnConformance(ComponentConformance):
    """Conformance of one KL function: ``component = "<name>"``."""

    kind = "kl_fn"


class EntropyLossConformance(ComponentConformance):
    """Conformance of one entropy loss: ``component = "<name>"``."""

    kind = "entropy_loss"


class ValueLossConformance(ComponentConformance):
    """Conformance of one value loss: ``component = "<name>"``."""

    kind = "value_loss"


class WorkflowConformance(ComponentConformance):
    """Every check for one workflow."""

    kind = "workflow"


class TaskConformance(ComponentConformance):
    """Conformance of one task set: ``component = "<name>"`` (``args`` for the arguments it cannot do
    without, e.g. a data file)."""

    kind = "task"


class TaskSelectorConformance(ComponentConformance):
    """Conformance of one task selector: ``component = "<name>"``."""

    kind = "task_selector"


class ExperienceOperatorConformance(ComponentConformance):
    """Conformance of one experience operator: ``component = "<name>"``."""

    kind = "operator"


class PriorityFnConformance(ComponentConformance):
    """Conformance of one replay priority function: ``component = "<name>"``."""

    kind = "priority_fn"


class ToolParserConformance(ComponentConformance):
    """Every check for one tool parser: ``component = "<name>"``."""

    kind = "tool_parser"


class AlgorithmConformance(ComponentConformance):
    """Conformance of one algorithm preset: ``component = "<name>"``."""

    kind = "algorithm"


class PluginConformance(_Conformance):
    """Every check for every component an installed distribution provides (and its hook modules).

    Attributes:
        distribution: the distribution name (``"trinity-plugin-sapo"``); when None, the names given
            with ``--trinity-plugin``.
        args: argument overrides per component, keyed by ``"<kind>:<name>"`` or ``"<name>"``.
    """

    distribution: ClassVar[str | None] = None
    args: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    @classmethod
    def _cases(cls, config: pytest.Config) -> list[Case]:
        if cls.distribution is not None:
            names = [cls.distribution]
        else:
            names = list(config.getoption(OPTION_DEST, default=None) or [])
        if not names:
            where = f"{cls.__module__}.{cls.__qualname__}"
            return [
                Case(
                    "setup",
                    problem=f"{where}: set `distribution = '<distribution name>'` on the class, or run "
                    f"pytest --trinity-plugin=<distribution name>",
                )
            ]
        cases: list[Case] = []
        for name in names:
            found = distribution_cases(name, cls.args)
            if len(names) > 1:
                found = [Case(f"{name}:{c.id}", c.subject, c.check, c.problem, c.runner) for c in found]
            cases.extend(found)
        return cases


def distribution_cases(distribution: str, args: Mapping[str, Mapping[str, Any]] | None = None) -> list[Case]:
    """The cases for everything ``distribution`` provides: components of every kind (from entry points
    and ``trinity_register_components`` hooks) and hook modules."""
    from trinity_core import registry

    args = args or {}
    try:
        dist = md.distribution(distribution)
    except md.PackageNotFoundError:
        from trinity_core.testing._names import not_installed_message

        return [Case(f"{distribution}:installed", problem=not_installed_message(distribution))]
    wanted = registry.normalize_distribution(distribution)
    records = [
        r
        for r in registry.list_components(strict=False)
        if registry.normalize_distribution(r.distribution) == wanted
    ]
    hooks = [ep for ep in dist.entry_points if ep.group == registry.HOOKS_NAMESPACE]
    if not records and not hooks:
        groups = ", ".join(k.namespace for k in registry.kinds())
        return [
            Case(
                f"{distribution}:provides",
                problem=f"distribution {distribution!r} {dist.version} provides no components and no hooks: "
                f'declare [project.entry-points."<namespace>"] tables (namespaces: {groups}, '
                f"{registry.HOOKS_NAMESPACE}) in its pyproject.toml and reinstall it (pip install -e) so "
                f"the entry points are recorded",
            )
        ]
    cases: list[Case] = []
    for rec in records:
        if rec.error is not None:
            cases.append(
                Case(
                    f"{rec.kind}:{rec.name}:loads",
                    problem=f"{rec.kind} plugin {rec.error.describe()}\n{rec.error.traceback}",
                )
            )
            continue
        overrides = args.get(f"{rec.kind}:{rec.name}", args.get(rec.name, {}))
        subject = Subject(
            rec.kind, rec.name, rec.obj, rec.distribution, rec.version, rec.value, dict(overrides)
        )
        cases.extend(cases_for(subject))
    for ep in hooks:
        cases.append(Case(f"hooks:{ep.name}:loads", runner=_hook_runner(distribution, ep)))
    return cases


def _hook_runner(distribution: str, ep: md.EntryPoint) -> Callable[[], None]:
    def run() -> None:
        from trinity_core.hooks import TrinityPluginManager

        where = f"hook module {ep.name!r} ({ep.value}) from {distribution}"
        try:
            module = ep.load()
        except Exception as exc:
            pytest.fail(f"{where} fails to import: {type(exc).__name__}: {exc}", pytrace=False)
        try:
            TrinityPluginManager().register(module, name=ep.name)
        except Exception as exc:
            pytest.fail(f"{where} does not register: {exc}", pytrace=False)

    return run
