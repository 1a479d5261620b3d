"""The ``reinforceplusplus`` and ``rloo`` presets: seed-002 flags, components, resolution."""

from __future__ import annotations

import pytest
from trinity_plugin_reinforce import (
    REINFORCEPLUSPLUSAdvantageFn,
    ReinforcePlusPlusAlgorithm,
    RLOOAdvantageFn,
    RLOOAlgorithm,
)

from trinity_core.components import ALGORITHM_CONFIG_KEYS

PRESETS = [
    (ReinforcePlusPlusAlgorithm, "reinforceplusplus", REINFORCEPLUSPLUSAdvantageFn),
    (RLOOAlgorithm, "rloo", RLOOAdvantageFn),
]


@pytest.mark.parametrize(("preset", "adv", "_cls"), PRESETS)
def test_flags_and_default_config_match_seed_002(preset: type, adv: str, _cls: type) -> None:
    assert preset.use_critic is False
    assert preset.use_reference is True
    assert preset.compute_advantage_in_trainer is True
    assert preset.can_balance_batch is True
    assert preset.schema == "experience"
    config = preset.default_config()
    assert config == {
        "repeat_times": 2,
        "advantage_fn": adv,
        "policy_loss_fn": "ppo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    assert set(config) <= ALGORITHM_CONFIG_KEYS
    assert config is not preset.default_config()


@pytest.mark.parametrize(("preset", "_adv", "cls"), PRESETS)
def test_advantage_placement_agrees_with_the_flag(preset: type, _adv: str, cls: type) -> None:
    assert cls.compute_in_trainer() is preset.compute_advantage_in_trainer


def test_constants_are_write_once() -> None:
    with pytest.raises(AttributeError):
        RLOOAlgorithm.use_critic = True  # type: ignore[misc]


@pytest.mark.parametrize(("preset", "adv", "_cls"), PRESETS)
def test_presets_resolve_with_the_declared_plugins(preset: type, adv: str, _cls: type) -> None:
    from trinity_core import registry
    from trinity_core.config import resolve_config

    name = adv  # each preset is registered under the name of its advantage function
    resolved = resolve_config({"algorithm": {"algorithm_type": name, "advantage_fn_args": {}}})
    algo = resolved.algorithm
    assert registry.resolve("algorithm", name) is preset
    assert algo.repeat_times == 2
    assert algo.advantage_fn == adv
    for kind, key in (
        ("advantage_fn", "advantage_fn"),
        ("policy_loss", "policy_loss_fn"),
        ("kl_fn", "kl_loss_fn"),
        ("entropy_loss", "entropy_loss_fn"),
    ):
        assert registry.resolve(kind, getattr(algo, key)).name() == getattr(algo, key)


def test_reinforceplusplus_gamma_reaches_the_component() -> None:
    from trinity_core import registry
    from trinity_core.config import resolve_config

    algo = resolve_config(
        {"algorithm": {"algorithm_type": "reinforceplusplus", "advantage_fn_args": {"gamma": 0.9}}}
    ).algorithm
    fn = registry.create("advantage_fn", algo.advantage_fn, algo.advantage_fn_args)
    assert fn.gamma == 0.9
