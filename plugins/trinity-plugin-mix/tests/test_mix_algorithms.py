"""The mix and mix_chord presets: flags, default config, end-to-end resolution with the declared plugins."""

from __future__ import annotations

import pytest
from trinity_plugin_mix import MIXAlgorithm, MIXCHORDAlgorithm

from trinity_core import registry
from trinity_core.components import ALGORITHM_CONFIG_KEYS
from trinity_core.config import resolve_config


@pytest.mark.parametrize(("cls", "loss"), [(MIXAlgorithm, "mix"), (MIXCHORDAlgorithm, "mix_chord")])
def test_flags_and_default_config(cls: type, loss: str) -> None:
    assert (cls.use_critic, cls.use_reference, cls.compute_advantage_in_trainer) == (False, True, False)
    assert cls.can_balance_batch is True
    assert cls.schema == "experience"
    assert cls.default_config() == {
        "repeat_times": 8,
        "advantage_fn": "grpo",
        "policy_loss_fn": loss,
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "mix",
    }
    assert set(cls.default_config()) <= ALGORITHM_CONFIG_KEYS
    with pytest.raises(AttributeError):
        cls.use_reference = False


@pytest.mark.parametrize("name", ["mix", "mix_chord"])
def test_presets_resolve_end_to_end(name: str) -> None:
    resolved = resolve_config(
        {"algorithm": {"algorithm_type": name, "policy_loss_fn_args": {"clip_range": 0.3}}}
    )
    algo = resolved.algorithm
    assert (algo.repeat_times, algo.advantage_fn, algo.kl_loss_fn, algo.entropy_loss_fn) == (
        8,
        "grpo",
        "k2",
        "mix",
    )
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args)
    assert (loss.clip_low, loss.clip_high) == (0.3, 0.3)
    advantage = registry.resolve("advantage_fn", algo.advantage_fn)
    assert advantage.compute_in_trainer() is registry.resolve("algorithm", name).compute_advantage_in_trainer
    assert registry.resolve("entropy_loss", algo.entropy_loss_fn).name() == "mix"
