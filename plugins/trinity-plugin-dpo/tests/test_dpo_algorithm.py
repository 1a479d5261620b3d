"""The dpo preset: flags, defaults, end-to-end resolution, and each check_config rule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from trinity_plugin_dpo import DPOAlgorithm

from trinity_core import registry
from trinity_core.components import ALGORITHM_CONFIG_KEYS
from trinity_core.config import ConfigError, resolve_config

OFFLINE = {"mode": "train", "data": {"experiences": "data/pairs"}}
"""The part of a trinity-core run configuration that the dpo preset requires."""


def offline(**algorithm: object) -> SimpleNamespace:
    """A configuration object in mode train with stored experiences and the given algorithm fields."""
    return SimpleNamespace(
        mode="train", data=SimpleNamespace(experiences="data/pairs"), algorithm=SimpleNamespace(**algorithm)
    )


def test_flags_match_the_seed() -> None:
    assert (DPOAlgorithm.use_critic, DPOAlgorithm.use_reference) == (False, True)
    assert DPOAlgorithm.compute_advantage_in_trainer is False
    assert DPOAlgorithm.can_balance_batch is False
    assert DPOAlgorithm.schema == "dpo"
    with pytest.raises(AttributeError):
        DPOAlgorithm.can_balance_batch = True  # type: ignore[misc]


def test_default_config() -> None:
    config = DPOAlgorithm.default_config()
    assert config == {
        "repeat_times": 2,
        "policy_loss_fn": "dpo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    assert set(config) <= ALGORITHM_CONFIG_KEYS


def test_preset_resolves_end_to_end() -> None:
    resolved = resolve_config(
        {**OFFLINE, "algorithm": {"algorithm_type": "dpo", "policy_loss_fn_args": {"beta": 0.2}}}
    )
    algo = resolved.algorithm
    assert (algo.repeat_times, algo.advantage_fn, algo.kl_loss_fn) == (2, None, "k2")
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args)
    assert (loss.beta, loss.label_smoothing) == (0.2, 0.0)
    assert registry.resolve("kl_fn", algo.kl_loss_fn).name() == "k2"


def test_repeat_times_other_than_two_is_an_error() -> None:
    with pytest.raises(ConfigError, match="repeat_times = 2"):
        resolve_config({**OFFLINE, "algorithm": {"algorithm_type": "dpo", "repeat_times": 4}})
    resolve_config({**OFFLINE, "algorithm": {"algorithm_type": "dpo", "repeat_times": 2}})


@pytest.mark.parametrize("kl", ["none", None])
def test_no_kl_loss_is_replaced_by_k2_with_a_warning(
    kl: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    config = offline(repeat_times=2, kl_loss_fn=kl)
    with caplog.at_level("WARNING"):
        DPOAlgorithm.check_config(config)
    assert config.algorithm.kl_loss_fn == "k2"
    assert "needs a KL loss" in caplog.text


def test_user_kl_none_resolves_to_k2_with_its_arguments() -> None:
    resolved = resolve_config({**OFFLINE, "algorithm": {"algorithm_type": "dpo", "kl_loss_fn": "none"}})
    assert resolved.algorithm.kl_loss_fn == "k2"
    assert resolved.algorithm.kl_loss_fn_args == registry.resolve("kl_fn", "k2").default_args()
    assert resolved.sources["algorithm.kl_loss_fn"] == "preset 'dpo' check_config"
    # Another estimator named by the user is kept.
    assert (
        resolve_config(
            {**OFFLINE, "algorithm": {"algorithm_type": "dpo", "kl_loss_fn": "k3"}}
        ).algorithm.kl_loss_fn
        == "k3"
    )


@pytest.mark.parametrize("mode", ["both", "explore"])
def test_modes_that_explore_are_rejected(mode: str) -> None:
    with pytest.raises(ValueError, match=f"does not support mode '{mode}'; set `mode: train`"):
        DPOAlgorithm.check_config(SimpleNamespace(mode=mode, algorithm=SimpleNamespace(repeat_times=2)))


def test_core_config_rules_fire_through_resolve_config() -> None:
    with pytest.raises(ConfigError, match=r"rejected by check_config: .*does not support mode 'both'"):
        resolve_config({"algorithm": {"algorithm_type": "dpo"}})
    with pytest.raises(ConfigError, match=r"`data\.experiences`, which is not set"):
        resolve_config({"mode": "train", "algorithm": {"algorithm_type": "dpo"}})
    assert resolve_config({**OFFLINE, "algorithm": {"algorithm_type": "dpo"}}).mode == "train"


def test_training_needs_the_data_set_and_uses_checkpoint_sync() -> None:
    algorithm = SimpleNamespace(repeat_times=2, kl_loss_fn="k2")
    with pytest.raises(ValueError, match=r"data\.experiences"):
        DPOAlgorithm.check_config(SimpleNamespace(mode="train", algorithm=algorithm))
    config = SimpleNamespace(
        mode="train",
        algorithm=algorithm,
        data={"experiences": "data/pairs"},
        synchronizer=SimpleNamespace(sync_method="nccl", sync_interval=1),
        trainer=SimpleNamespace(save_interval=20),
    )
    DPOAlgorithm.check_config(config)
    assert (config.synchronizer.sync_method, config.synchronizer.sync_interval) == ("checkpoint", 20)
