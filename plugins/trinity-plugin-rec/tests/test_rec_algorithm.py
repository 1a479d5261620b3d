"""The ``rec`` preset: trinity-rft's flags and components for it, and its effective loss arguments."""

from __future__ import annotations

import pytest
from trinity_plugin_rec import RECAlgorithm, RECGroupedAdvantage, RECPolicyLossFn


def test_flags_are_the_seed_flags() -> None:
    assert RECAlgorithm.use_critic is False
    assert RECAlgorithm.use_reference is True
    assert RECAlgorithm.compute_advantage_in_trainer is False
    assert RECAlgorithm.compute_advantage_in_trainer == RECGroupedAdvantage.compute_in_trainer()
    assert RECAlgorithm.can_balance_batch is True
    assert RECAlgorithm.schema == "experience"
    with pytest.raises(AttributeError):
        RECAlgorithm.use_critic = True  # type: ignore[misc]


def test_default_config_names_the_reference_components() -> None:
    config = RECAlgorithm.default_config()
    assert config == {
        "repeat_times": 2,
        "advantage_fn": "rec",
        "policy_loss_fn": "rec",
        "policy_loss_fn_args": {"epsilon_low_prime": 0.6, "epsilon_high_prime": 2.0},
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    # The preset's loss arguments merge over the loss constructor's defaults (trinity-rft's names and values).
    args = RECPolicyLossFn.validate_args(config["policy_loss_fn_args"]).model_dump()
    assert args["epsilon_low_prime"] == 0.6
    assert args["epsilon_high_prime"] == 2.0
    assert args["epsilon_low"] == 0.2
