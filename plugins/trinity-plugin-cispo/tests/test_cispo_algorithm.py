"""The ``cispo`` algorithm preset."""

from __future__ import annotations

import pytest
from trinity_plugin_cispo import CISPOAlgorithm, CISPOPolicyLossFn

from trinity_core import registry
from trinity_core.components import ALGORITHM_CONFIG_KEYS
from trinity_core.config import resolve_config


def test_flags_match_the_seed() -> None:
    assert CISPOAlgorithm.use_critic is False
    assert CISPOAlgorithm.use_reference is True
    assert CISPOAlgorithm.compute_advantage_in_trainer is False
    assert CISPOAlgorithm.can_balance_batch is True
    assert CISPOAlgorithm.schema == "experience"
    assert CISPOAlgorithm.paper == "https://arxiv.org/abs/2506.13585"
    assert CISPOAlgorithm.summary().startswith("CISPO:")
    with pytest.raises(AttributeError):
        CISPOAlgorithm.schema = "sft"  # type: ignore[misc]


def test_default_config_is_the_reference_table_row() -> None:
    config = CISPOAlgorithm.default_config()
    assert config == {
        "repeat_times": 2,
        "advantage_fn": "grpo",
        "policy_loss_fn": "cispo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    assert set(config) <= ALGORITHM_CONFIG_KEYS


def test_preset_resolves_end_to_end_with_the_declared_plugins() -> None:
    algo = resolve_config(
        {"algorithm": {"algorithm_type": "cispo", "policy_loss_fn_args": {"enable_mask_clip": True}}}
    ).algorithm
    assert algo.repeat_times == 2
    assert algo.policy_loss_fn_args == {**CISPOPolicyLossFn.default_args(), "enable_mask_clip": True}
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args, backend="verl")
    assert isinstance(loss, CISPOPolicyLossFn)
    assert loss.enable_mask_clip is True
    assert (loss.clip_range_low, loss.clip_range_high) == (1.0, 0.28)
    advantage = registry.resolve("advantage_fn", algo.advantage_fn)
    assert advantage.compute_in_trainer() is CISPOAlgorithm.compute_advantage_in_trainer
    for kind, name in (
        ("kl_fn", algo.kl_penalty_fn),
        ("kl_fn", algo.kl_loss_fn),
        ("entropy_loss", algo.entropy_loss_fn),
    ):
        assert registry.resolve(kind, name).name() == name
