"""The kit on the distribution (the workflow, both parsers, the task), and the names it registers."""

from __future__ import annotations

from trinity_core import registry
from trinity_core.testing import PluginConformance


class TestConformance(PluginConformance):
    distribution = "trinity-plugin-tools"


def test_components_are_registered() -> None:
    assert registry.record("workflow", "tools").distribution == "trinity-plugin-tools"
    assert registry.record("tool_parser", "hermes").distribution == "trinity-plugin-tools"
    assert registry.record("tool_parser", "mistral").distribution == "trinity-plugin-tools"
    assert registry.record("task", "multiplication").distribution == "trinity-plugin-tools"
