"""The on_policy_distill and jsd presets: flags as trinity-rft 0.6.0's presets, components resolve."""

from __future__ import annotations

import pytest
from trinity_plugin_distill import (
    JSDAdvantage,
    JSDAlgorithm,
    OnPolicyDistillAdvantage,
    OnPolicyDistillAlgorithm,
)

from trinity_core import registry


@pytest.mark.parametrize("algorithm", [OnPolicyDistillAlgorithm, JSDAlgorithm])
def test_flags(algorithm: type) -> None:
    flags = (
        algorithm.use_critic,
        algorithm.use_reference,
        algorithm.compute_advantage_in_trainer,
        algorithm.can_balance_batch,
        algorithm.schema,
    )
    assert flags == (False, False, True, True, "experience")
    with pytest.raises(AttributeError):
        algorithm.use_critic = True


def test_default_configs() -> None:
    assert OnPolicyDistillAlgorithm.default_config() == {
        "repeat_times": 8,
        "advantage_fn": "on_policy_distill",
        "advantage_fn_args": {"kl_coef": 1.0},
        "policy_loss_fn": "ppo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }
    jsd = JSDAlgorithm.default_config()
    assert jsd["advantage_fn"] == "jsd"
    assert jsd["advantage_fn_args"] == {"kl_coef": 1.0, "lambda_coef": 0.5}


@pytest.mark.parametrize(
    ("algorithm", "advantage"),
    [(OnPolicyDistillAlgorithm, OnPolicyDistillAdvantage), (JSDAlgorithm, JSDAdvantage)],
)
def test_advantage_runs_where_the_preset_says(algorithm: type, advantage: type) -> None:
    assert advantage.compute_in_trainer() is algorithm.compute_advantage_in_trainer
    name = algorithm.default_config()["advantage_fn"]
    assert registry.resolve("advantage_fn", name) is advantage
    for key, kind in (
        ("policy_loss_fn", "policy_loss"),
        ("kl_loss_fn", "kl_fn"),
        ("entropy_loss_fn", "entropy_loss"),
    ):
        assert registry.resolve(kind, algorithm.default_config()[key]) is not None
