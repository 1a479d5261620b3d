"""The ``ppo`` algorithm preset: flags and default components as trinity-rft 0.6.0's ``ppo`` preset."""

from __future__ import annotations

import pytest
from trinity_plugin_ppo import PPOAdvantageFn, PPOAlgorithm

from trinity_core.components import AlgorithmType
from trinity_core.testing.reference import import_reference


def test_flags_and_default_config() -> None:
    assert issubclass(PPOAlgorithm, AlgorithmType)
    assert PPOAlgorithm.use_critic is True
    assert PPOAlgorithm.use_reference is True
    assert PPOAlgorithm.compute_advantage_in_trainer is True
    assert PPOAlgorithm.can_balance_batch is True
    assert PPOAlgorithm.schema == "experience"
    assert PPOAlgorithm.default_config() == {
        "repeat_times": 1,
        "advantage_fn": "ppo",
        "policy_loss_fn": "ppo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    # The advantage it names runs in the trainer, as the flag says.
    assert PPOAdvantageFn.compute_in_trainer() is PPOAlgorithm.compute_advantage_in_trainer


def test_constants_are_write_once() -> None:
    with pytest.raises(AttributeError):
        PPOAlgorithm.use_critic = False  # type: ignore[misc]


@pytest.mark.reference
def test_flags_and_components_match_the_reference() -> None:
    ref = import_reference("trinity.algorithm.algorithm").PPOAlgorithm
    for flag in (
        "use_critic",
        "use_reference",
        "compute_advantage_in_trainer",
        "can_balance_batch",
        "schema",
    ):
        assert getattr(PPOAlgorithm, flag) == getattr(ref, flag), flag
    ours = PPOAlgorithm.default_config()
    # sample_strategy is not an algorithm config key in trinity-core (the trainer owns sampling).
    theirs = {k: v for k, v in ref.default_config().items() if k != "sample_strategy"}
    assert ours == theirs
