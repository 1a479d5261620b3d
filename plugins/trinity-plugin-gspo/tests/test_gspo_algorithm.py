"""The ``gspo`` algorithm preset and how its loss's own aggregation mode survives config resolution."""

from __future__ import annotations

import pytest
from trinity_plugin_gspo import GSPOAlgorithm, GSPOLossFn

from trinity_core import registry
from trinity_core.components import ALGORITHM_CONFIG_KEYS
from trinity_core.config import resolve_config


def test_flags_match_the_seed() -> None:
    assert GSPOAlgorithm.use_critic is False
    assert GSPOAlgorithm.use_reference is True
    assert GSPOAlgorithm.compute_advantage_in_trainer is False
    assert GSPOAlgorithm.can_balance_batch is True
    assert GSPOAlgorithm.schema == "experience"
    assert GSPOAlgorithm.paper == "https://arxiv.org/abs/2507.18071"
    assert GSPOAlgorithm.summary().startswith("GSPO:")


def test_default_config_is_the_reference_table_row() -> None:
    config = GSPOAlgorithm.default_config()
    assert config == {
        "repeat_times": 2,
        "advantage_fn": "grpo",
        "policy_loss_fn": "gspo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    assert set(config) <= ALGORITHM_CONFIG_KEYS
    with pytest.raises(AttributeError):
        GSPOAlgorithm.use_critic = True  # type: ignore[misc]


def test_preset_resolves_with_the_losss_own_aggregation_mode() -> None:
    # The reference's validator overwrote GSPO's seq-mean-token-mean with the global token-mean.
    algo = resolve_config({"algorithm": {"algorithm_type": "gspo"}}).algorithm
    assert algo.repeat_times == 2
    assert algo.policy_loss_fn == "gspo"
    assert algo.policy_loss_fn_args == GSPOLossFn.default_args()
    assert algo.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-mean"
    loss = registry.create("policy_loss", algo.policy_loss_fn, algo.policy_loss_fn_args, backend="verl")
    assert isinstance(loss, GSPOLossFn)
    assert (loss.clip_range_low, loss.clip_range_high) == (3e-4, 4e-4)
    for kind, name in (
        ("advantage_fn", algo.advantage_fn),
        ("kl_fn", algo.kl_penalty_fn),
        ("kl_fn", algo.kl_loss_fn),
        ("entropy_loss", algo.entropy_loss_fn),
    ):
        assert registry.resolve(kind, name).name() == name
    assert registry.resolve("advantage_fn", "grpo").compute_in_trainer() is False


def test_a_global_mode_set_by_the_user_applies_and_per_loss_args_still_win() -> None:
    algo = resolve_config({"algorithm": {"algorithm_type": "gspo", "loss_agg_mode": "token-mean"}}).algorithm
    assert algo.policy_loss_fn_args["loss_agg_mode"] == "token-mean"
    algo = resolve_config(
        {
            "algorithm": {
                "algorithm_type": "gspo",
                "loss_agg_mode": "token-mean",
                "policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-sum", "clip_range_high": 1e-3},
            }
        }
    ).algorithm
    assert algo.policy_loss_fn_args == {
        "loss_agg_mode": "seq-mean-token-sum",
        "clip_range": None,
        "clip_range_low": None,
        "clip_range_high": 1e-3,
    }


def test_geo_mean_is_registered_beside_gspo() -> None:
    from trinity_plugin_gspo import GMPOPolicyLossFn

    assert registry.resolve("policy_loss", "geo_mean") is GMPOPolicyLossFn
    assert GMPOPolicyLossFn.name() == "geo_mean"
