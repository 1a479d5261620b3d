"""The ``gigpo`` preset: the reference's flags, components and component arguments."""

from __future__ import annotations

from trinity_plugin_gigpo import GiGPOAdvantageFn, GiGPOAlgorithm


def test_flags_and_default_config() -> None:
    algo = GiGPOAlgorithm
    assert (algo.use_critic, algo.use_reference, algo.can_balance_batch) == (False, True, True)
    assert algo.compute_advantage_in_trainer is False
    assert algo.compute_advantage_in_trainer == GiGPOAdvantageFn.compute_in_trainer()
    assert algo.schema == "experience"
    config = algo.default_config()
    assert config == {
        "repeat_times": 8,
        "advantage_fn": "gigpo",
        "advantage_fn_args": {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
        "policy_loss_fn": "ppo",
        "policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.2, "loss_agg_mode": "token-mean"},
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
    assert (
        GiGPOAdvantageFn.validate_args(config["advantage_fn_args"]).model_dump()
        == GiGPOAdvantageFn.default_args()
    )
