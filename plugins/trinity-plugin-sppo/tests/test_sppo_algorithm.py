"""The ``sppo`` algorithm preset."""

from __future__ import annotations

import pytest
from trinity_plugin_sppo import sPPOAlgorithm, sPPOPolicyLossFn

from trinity_core import registry
from trinity_core.components import ALGORITHM_CONFIG_KEYS
from trinity_core.config import resolve_config


def test_flags_match_the_seed() -> None:
    assert sPPOAlgorithm.use_critic is False
    assert sPPOAlgorithm.use_reference is False
    assert sPPOAlgorithm.compute_advantage_in_trainer is False
    assert sPPOAlgorithm.can_balance_batch is True
    assert sPPOAlgorithm.schema == "experience"
    assert sPPOAlgorithm.paper == "https://arxiv.org/abs/2108.05828"
    assert sPPOAlgorithm.summary().startswith("sPPO:")
    with pytest.raises(AttributeError):
        sPPOAlgorithm.schema = "sft"  # type: ignore[misc]


def test_default_config_is_the_reference_table_row() -> None:
    config = sPPOAlgorithm.default_config()
    assert config == {
        "repeat_times": 2,
        "advantage_fn": "opmd",
        "policy_loss_fn": "sppo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }
    assert set(config) <= ALGORITHM_CONFIG_KEYS


def test_preset_resolves_end_to_end_with_the_declared_plugins() -> None:
    algo = resolve_config(
        {"algorithm": {"algorithm_type": "sppo", "policy_loss_fn_args": {"epsilon": 0.2}}}
    ).algorithm
    assert algo.repeat_times == 2
    assert algo.policy_loss_fn_args == {"loss_agg_mode": "token-mean", "epsilon": 0.2}
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args, backend="verl")
    assert isinstance(loss, sPPOPolicyLossFn)
    assert loss.epsilon == 0.2
    advantage = registry.resolve("advantage_fn", algo.advantage_fn)
    assert advantage.compute_in_trainer() is sPPOAlgorithm.compute_advantage_in_trainer
    for kind, name in (
        ("kl_fn", algo.kl_penalty_fn),
        ("kl_fn", algo.kl_loss_fn),
        ("entropy_loss", algo.entropy_loss_fn),
    ):
        assert registry.resolve(kind, name).name() == name
