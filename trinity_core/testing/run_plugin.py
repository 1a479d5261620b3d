"""Collected by ``pytest --trinity-plugin=NAME``: the conformance suite for the named distributions."""

from __future__ import annotations

from trinity_core.testing.suites import PluginConformance

__all__ = ["TestInstalledPlugin"]


class TestInstalledPlugin(PluginConformance):
    """Every conformance check for the distributions named by ``--trinity-plugin``."""
