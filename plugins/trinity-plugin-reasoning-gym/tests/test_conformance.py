"""The kit on the distribution, and its components resolving with the distribution named."""

from __future__ import annotations

from trinity_core import registry
from trinity_core.testing import PluginConformance


class TestConformance(PluginConformance):
    distribution = "trinity-plugin-reasoning-gym"


def test_components_are_registered() -> None:
    assert registry.record("task", "reasoning_gym").distribution == "trinity-plugin-reasoning-gym"
    assert registry.record("reward_fn", "reasoning_gym_score").distribution == "trinity-plugin-reasoning-gym"
