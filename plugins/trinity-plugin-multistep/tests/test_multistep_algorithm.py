"""The ``multi_step_grpo`` preset: trinity-rft's flags and components for it."""

from __future__ import annotations

import pytest
from trinity_plugin_multistep import MultiStepGRPOAlgorithm, StepWiseGRPOAdvantageFn


def test_flags_and_default_config() -> None:
    algo = MultiStepGRPOAlgorithm
    assert (algo.use_critic, algo.use_reference, algo.can_balance_batch) == (False, True, True)
    assert algo.compute_advantage_in_trainer is False
    assert algo.compute_advantage_in_trainer == StepWiseGRPOAdvantageFn.compute_in_trainer()
    assert algo.schema == "experience"
    assert algo.default_config() == {
        "repeat_times": 8,
        "advantage_fn": "step_wise_grpo",
        "policy_loss_fn": "ppo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    with pytest.raises(AttributeError):
        algo.schema = "sft"  # type: ignore[misc]
