"""The sft, cpt and raft presets: flags, default config, end-to-end resolution and check_config rules."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from trinity_plugin_sft import CPTAlgorithm, RAFTAlgorithm, SFTAlgorithm
from trinity_plugin_sft.config_checks import is_missing, lookup, run_mode

from trinity_core import registry
from trinity_core.components import ALGORITHM_CONFIG_KEYS, GroupAdvantage, TrainerAdvantage
from trinity_core.config import ConfigError, resolve_config

SFT_LIKE = {"policy_loss_fn": "sft", "kl_penalty_fn": "none", "kl_loss_fn": "none", "entropy_loss_fn": "none"}


OFFLINE = {"mode": "train", "data": {"experiences": "data/sft"}}
"""The part of a trinity-core run configuration that the sft and cpt presets require."""


def fake_config(**sections: Any) -> SimpleNamespace:
    """A configuration object with the fields the checks read (mode, data, synchronizer, trainer)."""
    return SimpleNamespace(**sections)


def data(path: str | None) -> SimpleNamespace:
    return SimpleNamespace(experiences=path)


@pytest.mark.parametrize(
    ("cls", "schema"), [(SFTAlgorithm, "sft"), (CPTAlgorithm, "cpt"), (RAFTAlgorithm, "experience")]
)
def test_flags_and_default_config_match_the_seed(cls: type, schema: str) -> None:
    assert (cls.use_critic, cls.use_reference, cls.compute_advantage_in_trainer) == (False, False, False)
    assert cls.can_balance_batch is True
    assert cls.schema == schema
    # RAFT adds its reward ranking of rollouts (mode both) to the SFT components.
    assert cls.default_config() == (
        SFT_LIKE if cls is not RAFTAlgorithm else {"add_strategy": "raft", **SFT_LIKE}
    )
    assert set(cls.default_config()) <= ALGORITHM_CONFIG_KEYS
    with pytest.raises(AttributeError):
        cls.use_critic = True


@pytest.mark.parametrize("name", ["sft", "cpt", "raft"])
def test_presets_resolve_end_to_end(name: str) -> None:
    resolved = resolve_config(
        {
            **OFFLINE,
            "algorithm": {
                "algorithm_type": name,
                "policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-mean"},
            },
        }
    )
    algo = resolved.algorithm
    assert algo.advantage_fn is None  # none named: RAFT does not inherit a trainer-side 'ppo'
    assert algo.repeat_times == 1
    assert (algo.policy_loss_fn, algo.kl_loss_fn, algo.kl_penalty_fn, algo.entropy_loss_fn) == (
        "sft",
        "none",
        "none",
        "none",
    )
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args)
    assert loss.loss_agg_mode == "seq-mean-token-mean"


def test_lookup_reads_attributes_and_mappings_and_reports_missing_fields() -> None:
    config = SimpleNamespace(mode="train", data={"experiences": None}, buffer={"trainer_input": None})
    assert lookup(config, "mode") == "train"
    assert lookup(config, "data.experiences") is None
    assert lookup(config, "buffer.trainer_input.experience_buffer.path") is None
    assert is_missing(lookup(config, "synchronizer.sync_method"))
    assert run_mode(SimpleNamespace(mode=SimpleNamespace(value="both"))) == "both"
    assert run_mode(SimpleNamespace()) is None


@pytest.mark.parametrize("cls", [SFTAlgorithm, CPTAlgorithm])
@pytest.mark.parametrize("mode", ["both", "explore", "bench"])
def test_sft_rejects_every_mode_but_train(cls: type, mode: str) -> None:
    with pytest.raises(
        ValueError, match=rf"does not support mode '{mode}'; set `mode: train`.*data\.experiences"
    ):
        cls.check_config(fake_config(mode=mode, data=data("data/sft")))
    with pytest.raises(ValueError, match=r"does not support no mode; set `mode: train`"):
        cls.check_config(fake_config(data=data("data/sft")))  # a configuration model without a mode


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (fake_config(mode="train", data=data(None)), "is not set"),
        (fake_config(mode="train", data=data("")), "is not set"),
        (fake_config(mode="train"), "does not exist in this configuration model"),
    ],
)
def test_sft_training_needs_stored_experiences(config: SimpleNamespace, why: str) -> None:
    with pytest.raises(ValueError, match=rf"reads its experiences from `data\.experiences`, which {why}"):
        SFTAlgorithm.check_config(config)


def test_sft_training_forces_checkpoint_sync_every_save_interval(caplog: pytest.LogCaptureFixture) -> None:
    config = fake_config(
        mode="train",
        data=data("data/sft"),
        synchronizer=SimpleNamespace(sync_method="nccl", sync_interval=1),
        trainer=SimpleNamespace(save_interval=50),
    )
    with caplog.at_level("WARNING"):
        SFTAlgorithm.check_config(config)
    assert (config.synchronizer.sync_method, config.synchronizer.sync_interval) == ("checkpoint", 50)
    assert "checkpoint" in caplog.text


@pytest.mark.parametrize("name", ["sft", "cpt"])
def test_core_config_rules_fire_through_resolve_config(name: str) -> None:
    with pytest.raises(
        ConfigError, match=r"algorithm: rejected by check_config: .*does not support mode 'both'"
    ):
        resolve_config({"algorithm": {"algorithm_type": name}})
    with pytest.raises(ConfigError, match=r"`data\.experiences`, which is not set"):
        resolve_config({"mode": "train", "algorithm": {"algorithm_type": name}})
    resolved = resolve_config({**OFFLINE, "algorithm": {"algorithm_type": name}})
    assert (resolved.mode, resolved.data.experiences) == ("train", "data/sft")


class _TrainerSide(TrainerAdvantage):
    """A trainer-side advantage function (test double)."""

    def compute(self, batch: Any) -> Any:
        raise NotImplementedError


@pytest.fixture
def trainer_side_advantage() -> Any:
    registry.register("advantage_fn", "raft_test_trainer_side", _TrainerSide)
    yield "raft_test_trainer_side"
    registry.unregister("advantage_fn", "raft_test_trainer_side")


def test_raft_rejects_a_trainer_side_advantage_fn_when_the_pipeline_runs(trainer_side_advantage: str) -> None:
    algorithm = {"algorithm_type": "raft", "advantage_fn": trainer_side_advantage}
    with pytest.raises(
        ConfigError, match=r"rejected by check_config.*mode 'both' runs the experience pipeline"
    ):
        resolve_config({"algorithm": algorithm})
    # Mode train: RAFT's rule steps aside, the core placement check still rejects the function.
    with pytest.raises(ConfigError, match=r"runs in the trainer, but preset 'raft' computes advantages"):
        resolve_config({**OFFLINE, "algorithm": algorithm})
    algorithm = SimpleNamespace(advantage_fn=trainer_side_advantage)
    for mode in ("both", "explore"):
        with pytest.raises(ValueError, match=r"remove algorithm\.advantage_fn"):
            RAFTAlgorithm.check_config(SimpleNamespace(mode=mode, algorithm=algorithm))
    RAFTAlgorithm.check_config(SimpleNamespace(mode="train", algorithm=algorithm))  # pipeline does not run


class _PipelineSide(GroupAdvantage):
    """A pipeline-side advantage function (test double)."""

    def calculate_group_advantage(self, group_id: str, exps: list, precomputed_std: Any = None) -> Any:
        return exps, {}


def test_raft_accepts_a_pipeline_side_advantage_fn() -> None:
    registry.register("advantage_fn", "raft_test_pipeline_side", _PipelineSide)
    try:
        resolved = resolve_config(
            {"algorithm": {"algorithm_type": "raft", "advantage_fn": "raft_test_pipeline_side"}}
        )
    finally:
        registry.unregister("advantage_fn", "raft_test_pipeline_side")
    assert resolved.algorithm.advantage_fn == "raft_test_pipeline_side"
