"""The ``sapo`` algorithm preset."""

from __future__ import annotations

import pytest
from trinity_plugin_sapo import SAPOAlgorithm

from trinity_core.components import ALGORITHM_CONFIG_KEYS


def test_flags_match_the_seed() -> None:
    assert SAPOAlgorithm.use_critic is False
    assert SAPOAlgorithm.use_reference is True
    assert SAPOAlgorithm.compute_advantage_in_trainer is False
    assert SAPOAlgorithm.can_balance_batch is True
    assert SAPOAlgorithm.schema == "experience"
    assert SAPOAlgorithm.paper == "https://arxiv.org/abs/2511.20347"
    assert SAPOAlgorithm.summary().startswith("SAPO:")


def test_default_config() -> None:
    config = SAPOAlgorithm.default_config()
    assert config == {
        "repeat_times": 2,
        "advantage_fn": "grpo",
        "policy_loss_fn": "sapo",
        "policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-mean"},
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    assert set(config) <= ALGORITHM_CONFIG_KEYS
    assert config is not SAPOAlgorithm.default_config()  # a fresh dict: callers may edit it


def test_constants_are_write_once() -> None:
    with pytest.raises(AttributeError):
        SAPOAlgorithm.use_critic = True  # type: ignore[misc]


def test_advantage_fn_runs_in_the_pipeline_as_the_flag_says() -> None:
    from trinity_plugin_grpo import GRPOGroupedAdvantage

    assert GRPOGroupedAdvantage.compute_in_trainer() is SAPOAlgorithm.compute_advantage_in_trainer


def test_preset_resolves_end_to_end_with_the_declared_plugins() -> None:
    # The distribution's dependencies (grpo, kl, entropy plugins) provide every component it names.
    from trinity_core import registry
    from trinity_core.config import resolve_config

    resolved = resolve_config(
        {"algorithm": {"algorithm_type": "sapo", "policy_loss_fn_args": {"tau_neg": 2.0}}}
    )
    algo = resolved.algorithm
    assert registry.resolve("algorithm", "sapo") is SAPOAlgorithm
    assert algo.repeat_times == 2
    assert algo.policy_loss_fn_args == {
        "loss_agg_mode": "seq-mean-token-mean",
        "tau_pos": 1.0,
        "tau_neg": 2.0,
        "fused": False,
    }
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args, backend="verl")
    assert (loss.tau_pos, loss.tau_neg) == (1.0, 2.0)
    for kind, name in (
        ("advantage_fn", algo.advantage_fn),
        ("kl_fn", algo.kl_penalty_fn),
        ("kl_fn", algo.kl_loss_fn),
        ("entropy_loss", algo.entropy_loss_fn),
    ):
        assert registry.resolve(kind, name).name() == name


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ({}, "seq-mean-token-mean"),  # the preset's default: the paper's, verl's and TRL's mode
        ({"loss_agg_mode": "token-mean"}, "token-mean"),  # the global mode overrides the preset
        ({"policy_loss_fn_args": {"loss_agg_mode": "token-mean"}}, "token-mean"),  # per component
        ({"loss_agg_mode": "token-mean", "policy_loss_fn_args": {"loss_agg_mode": "token-sum"}}, "token-sum"),
    ],
)
def test_preset_aggregates_per_response_unless_told_otherwise(
    algorithm: dict[str, object], expected: str
) -> None:
    from trinity_core.config import resolve_config

    resolved = resolve_config({"algorithm": {"algorithm_type": "sapo", **algorithm}})
    assert resolved.algorithm.policy_loss_fn_args["loss_agg_mode"] == expected
    # Only the policy loss: the KL and entropy terms keep the algorithm's mode (None: the mode the
    # trainer passes, default token-mean), as verl's KL and entropy terms follow actor.loss_agg_mode.
    for key in ("kl_loss_fn_args", "entropy_loss_fn_args"):
        assert getattr(resolved.algorithm, key)["loss_agg_mode"] == algorithm.get("loss_agg_mode")


def test_the_loss_component_default_stays_token_mean() -> None:
    from trinity_plugin_sapo import SAPOPolicyLossFn

    assert SAPOPolicyLossFn().loss_agg_mode == "token-mean"
    from trinity_core.config import resolve_config

    plain = resolve_config({"algorithm": {"policy_loss_fn": "sapo", "advantage_fn": "grpo"}})
    assert plain.algorithm.policy_loss_fn_args["loss_agg_mode"] == "token-mean"
