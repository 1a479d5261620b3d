"""The task set and reward function resolve through the registry with the distribution named."""

from __future__ import annotations

from trinity_core import registry


def test_components_are_registered() -> None:
    assert registry.record("task", "reasoning_gym").distribution == "trinity-plugin-reasoning-gym"
    assert registry.record("reward_fn", "reasoning_gym_score").distribution == "trinity-plugin-reasoning-gym"
