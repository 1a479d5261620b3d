"""The ``opmd`` and ``asymre`` presets: seed-002 flags, default components, end-to-end resolution."""

from __future__ import annotations

import pytest
from trinity_plugin_opmd import AsymREAlgorithm, ASYMREGroupAdvantage, OPMDAlgorithm, OPMDGroupAdvantage

from trinity_core.components import ALGORITHM_CONFIG_KEYS

CASES = [
    (
        OPMDAlgorithm,
        "opmd",
        OPMDGroupAdvantage,
        True,
        {"advantage_fn": "opmd", "kl_loss_fn": "k2", "entropy_loss_fn": "default"},
    ),
    (
        AsymREAlgorithm,
        "asymre",
        ASYMREGroupAdvantage,
        False,
        {"advantage_fn": "asymre", "kl_loss_fn": "none", "entropy_loss_fn": "none"},
    ),
]


@pytest.mark.parametrize(("preset", "name", "adv", "use_ref", "components"), CASES)
def test_flags_and_default_config_match_seed_002(
    preset: type, name: str, adv: type, use_ref: bool, components: dict
) -> None:
    assert preset.use_critic is False
    assert preset.use_reference is use_ref
    assert preset.compute_advantage_in_trainer is False
    assert adv.compute_in_trainer() is preset.compute_advantage_in_trainer
    assert preset.can_balance_batch is True
    assert preset.schema == "experience"
    config = preset.default_config()
    assert config == {"repeat_times": 2, "policy_loss_fn": "opmd", "kl_penalty_fn": "none", **components}
    assert set(config) <= ALGORITHM_CONFIG_KEYS


def test_constants_are_write_once() -> None:
    with pytest.raises(AttributeError):
        OPMDAlgorithm.use_reference = False  # type: ignore[misc]


@pytest.mark.parametrize(("preset", "name", "adv", "use_ref", "components"), CASES)
def test_presets_resolve_with_the_declared_plugins(
    preset: type, name: str, adv: type, use_ref: bool, components: dict
) -> None:
    from trinity_core import registry
    from trinity_core.config import resolve_config

    algo = resolve_config(
        {"algorithm": {"algorithm_type": name, "policy_loss_fn_args": {"tau": 2.0}}}
    ).algorithm
    assert registry.resolve("algorithm", name) is preset
    assert algo.repeat_times == 2
    assert algo.policy_loss_fn_args == {"loss_agg_mode": "token-mean", "tau": 2.0}
    assert registry.resolve("advantage_fn", algo.advantage_fn) is adv
    for kind, key in (
        ("kl_fn", "kl_loss_fn"),
        ("kl_fn", "kl_penalty_fn"),
        ("entropy_loss", "entropy_loss_fn"),
    ):
        assert registry.resolve(kind, getattr(algo, key)).name() == getattr(algo, key)
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args, backend="verl")
    assert loss.tau == 2.0
