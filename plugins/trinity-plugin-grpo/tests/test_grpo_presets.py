"""The grpo and dapo presets: flags and defaults as trinity-rft 0.6.0's presets, resolution with the declared
plugin dependencies, and the check that the advantage function runs where the preset computes advantages
(docs/reference-differences.md, ``advantage-placement``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from trinity_plugin_grpo import DAPOAlgorithm, GRPOAlgorithm
from trinity_plugin_grpo.placement import check_advantage_placement

from trinity_core import registry
from trinity_core.components import AlgorithmType
from trinity_core.config import ConfigError, resolve_config


def flags(cls: type) -> tuple:
    return (
        cls.use_critic,
        cls.use_reference,
        cls.compute_advantage_in_trainer,
        cls.can_balance_batch,
        cls.schema,
    )


def test_flags_and_defaults_match_the_reference_table() -> None:
    assert flags(GRPOAlgorithm) == (False, True, False, True, "experience")
    assert flags(DAPOAlgorithm) == (False, False, False, True, "experience")
    common = {
        "advantage_fn": "grpo",
        "policy_loss_fn": "ppo",
        "kl_penalty_fn": "none",
        "entropy_loss_fn": "default",
    }
    assert GRPOAlgorithm.default_config() == {**common, "repeat_times": 2, "kl_loss_fn": "k2"}
    assert DAPOAlgorithm.default_config() == {**common, "repeat_times": 16, "kl_loss_fn": "none"}
    assert registry.resolve("algorithm", "grpo") is GRPOAlgorithm
    assert registry.resolve("algorithm", "dapo") is DAPOAlgorithm


def test_flags_are_write_once() -> None:
    with pytest.raises(AttributeError):
        GRPOAlgorithm.compute_advantage_in_trainer = True  # type: ignore[misc]


@pytest.mark.parametrize(("preset", "repeat", "kl_loss"), [("grpo", 2, "k2"), ("dapo", 16, "none")])
def test_presets_resolve_with_their_declared_dependencies(preset: str, repeat: int, kl_loss: str) -> None:
    algo = resolve_config({"algorithm": {"algorithm_type": preset}}).algorithm
    assert (algo.repeat_times, algo.advantage_fn, algo.policy_loss_fn) == (repeat, "grpo", "ppo")
    assert (algo.kl_penalty_fn, algo.kl_loss_fn, algo.entropy_loss_fn) == ("none", kl_loss, "default")


@pytest.mark.parametrize("preset", ["grpo", "dapo"])
@pytest.mark.parametrize("advantage", ["dr_grpo", "opo", "gpg", "grpo_passk", "grpo"])
def test_pipeline_side_advantage_functions_are_accepted(preset: str, advantage: str) -> None:
    config = {"algorithm": {"algorithm_type": preset, "advantage_fn": advantage}}
    assert resolve_config(config).algorithm.advantage_fn == advantage


@pytest.mark.parametrize("preset", ["grpo", "dapo"])
def test_trainer_side_grpo_verl_is_rejected_with_the_fix(preset: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config({"algorithm": {"algorithm_type": preset, "advantage_fn": "grpo_verl"}})
    message = str(info.value)
    assert "'grpo_verl' runs in the trainer" in message
    assert f"algorithm {preset!r}" in message
    assert "use advantage_fn 'grpo'" in message


def test_dapo_rejects_kl_terms_without_a_reference_model() -> None:
    for key in ("kl_loss_fn", "kl_penalty_fn"):
        with pytest.raises(ConfigError, match=f"algorithm.{key} is 'k2'.*use_reference=False"):
            resolve_config({"algorithm": {"algorithm_type": "dapo", key: "k2"}})
    assert (
        resolve_config(
            {"algorithm": {"algorithm_type": "grpo", "kl_penalty_fn": "k2"}}
        ).algorithm.kl_penalty_fn
        == "k2"
    )


class TrainerSidePreset(AlgorithmType):
    """A preset computing advantages in the trainer (to check the other direction)."""

    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = True
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """grpo_verl."""
        return {"advantage_fn": "grpo_verl"}


@pytest.mark.parametrize("shape", ["resolved", "nested-mapping", "flat-mapping"])
def test_placement_check_both_directions_and_config_shapes(shape: str) -> None:
    def with_name(name: str) -> Any:
        if shape == "resolved":
            return SimpleNamespace(algorithm=SimpleNamespace(advantage_fn=name))
        if shape == "nested-mapping":
            return {"algorithm": {"advantage_fn": name}}
        return {"advantage_fn": name}

    check_advantage_placement(TrainerSidePreset, with_name("grpo_verl"))
    check_advantage_placement(GRPOAlgorithm, with_name("dr_grpo"))
    with pytest.raises(ValueError, match="'dr_grpo' runs in the experience pipeline"):
        check_advantage_placement(TrainerSidePreset, with_name("dr_grpo"))
    with pytest.raises(ValueError, match="'grpo_verl' runs in the trainer"):
        GRPOAlgorithm.check_config(with_name("grpo_verl"))
    check_advantage_placement(GRPOAlgorithm, with_name("no_such_advantage"))  # left to the resolver
