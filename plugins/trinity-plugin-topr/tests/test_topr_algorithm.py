"""The ``topr`` algorithm preset."""

from __future__ import annotations

import pytest
from trinity_plugin_topr import TOPRAlgorithm, TOPRPolicyLossFn

from trinity_core import registry
from trinity_core.components import ALGORITHM_CONFIG_KEYS
from trinity_core.config import resolve_config


def test_flags_match_the_seed() -> None:
    assert TOPRAlgorithm.use_critic is False
    assert TOPRAlgorithm.use_reference is True
    assert TOPRAlgorithm.compute_advantage_in_trainer is False
    assert TOPRAlgorithm.can_balance_batch is True
    assert TOPRAlgorithm.schema == "experience"
    assert TOPRAlgorithm.paper == "https://arxiv.org/abs/2503.14286"
    assert TOPRAlgorithm.summary().startswith("TOPR:")
    with pytest.raises(AttributeError):
        TOPRAlgorithm.schema = "sft"  # type: ignore[misc]


def test_default_config_is_the_reference_table_row() -> None:
    config = TOPRAlgorithm.default_config()
    assert config == {
        "repeat_times": 2,
        "advantage_fn": "reinforce",
        "policy_loss_fn": "topr",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    assert set(config) <= ALGORITHM_CONFIG_KEYS


def test_preset_resolves_end_to_end_with_the_declared_plugins() -> None:
    algo = resolve_config(
        {"algorithm": {"algorithm_type": "topr", "policy_loss_fn_args": {"advantage_threshold": 0.5}}}
    ).algorithm
    assert algo.repeat_times == 2
    assert algo.policy_loss_fn_args == {"loss_agg_mode": "token-mean", "advantage_threshold": 0.5}
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args, backend="verl")
    assert isinstance(loss, TOPRPolicyLossFn)
    assert loss.advantage_threshold == 0.5
    advantage = registry.resolve("advantage_fn", algo.advantage_fn)
    assert advantage.compute_in_trainer() is TOPRAlgorithm.compute_advantage_in_trainer
    for kind, name in (
        ("kl_fn", algo.kl_penalty_fn),
        ("kl_fn", algo.kl_loss_fn),
        ("entropy_loss", algo.entropy_loss_fn),
    ):
        assert registry.resolve(kind, name).name() == name
