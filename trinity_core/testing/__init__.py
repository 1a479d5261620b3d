"""The conformance kit for plugin authors: prove a plugin meets the component contracts by subclassing.

A plugin's ``tests/test_conformance.py``::

    from trinity_core.testing import PluginConformance

    class TestConformance(PluginConformance):
        distribution = "trinity-plugin-sapo"

runs every check for every component that distribution provides. One component at a time::

    from trinity_core.testing import PolicyLossConformance

    class TestSapo(PolicyLossConformance):
        component = "sapo"          # registered name, or the class itself
        args = {"tau_pos": 0.5}     # optional overrides

``pytest --trinity-plugin=NAME`` (the kit's pytest plugin) runs the same suite against any installed
distribution. A component opts out of a check only by declaring why, on its class:
``conformance_skip = {"<check name>": "<reason>"}`` (reported as a skip with the reason). The checks and
the capabilities a component may declare are described in docs/conformance.md.
"""

from __future__ import annotations

from trinity_core.testing._core import Check, ConformanceError, Subject, all_checks, check_names, checks_for
from trinity_core.testing.host_syncs import count_host_syncs
from trinity_core.testing.suites import (
    AddStrategyConformance,
    AdvantageFnConformance,
    AlgorithmConformance,
    Case,
    ComponentConformance,
    EntropyLossConformance,
    ExperienceOperatorConformance,
    KLFnConformance,
    PluginConformance,
    PolicyLossConformance,
    PriorityFnConformance,
    TaskConformance,
    TaskSelectorConformance,
    ToolParserConformance,
    ValueLossConformance,
    WorkflowConformance,
    distribution_cases,
)

__all__ = [
    "AddStrategyConformance",
    "AdvantageFnConformance",
    "AlgorithmConformance",
    "Case",
    "Check",
    "ComponentConformance",
    "ConformanceError",
    "EntropyLossConformance",
    "ExperienceOperatorConformance",
    "KLFnConformance",
    "PluginConformance",
    "PolicyLossConformance",
    "PriorityFnConformance",
    "Subject",
    "TaskConformance",
    "TaskSelectorConformance",
    "ToolParserConformance",
    "ValueLossConformance",
    "WorkflowConformance",
    "all_checks",
    "check_names",
    "checks_for",
    "count_host_syncs",
    "distribution_cases",
]
