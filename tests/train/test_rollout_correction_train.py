"""The explorer's log-probs reach the policy loss as ``rollout_logprob`` (rollout-correction plugin)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL

from trinity_core.train import train


def _config(sync_offset: int) -> dict[str, Any]:
    return {
        "algorithm": {
            "algorithm_type": "grpo",
            "repeat_times": 4,
            "kl_loss_fn": "none",
            "policy_loss_fn": "rollout_correction",
            "policy_loss_fn_args": {"policy_loss_fn": "ppo", "level": "sequence", "mode": "truncate"},
        },
        "rollout": {"prompts_per_step": 4},
        "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
        "trainer": {"total_steps": 3, "checkpoint_every": 0, "progress": False, "threads": 1, "seed": 2},
        "synchronizer": {"sync_offset": sync_offset},
        "model": TINY_MODEL,
    }


def test_in_lock_step_the_behaviour_log_probs_are_the_learners(tmp_path: Path) -> None:
    register_length_reward()
    result = train(_config(0), run_dir=tmp_path / "lock")
    for row in result.history:
        # the same weights sampled the tokens: the generation's log-probs equal the update's forward pass
        assert abs(row["actor/rollout_is_log_ratio_mean"]) < 1e-4
        assert abs(row["actor/rollout_is_mean"] - 1.0) < 1e-3


def test_one_step_off_the_behaviour_policy_differs_and_is_weighted(tmp_path: Path) -> None:
    register_length_reward()
    result = train(_config(1), run_dir=tmp_path / "off")
    assert abs(result.history[0]["actor/rollout_is_log_ratio_mean"]) < 1e-4  # step 1: nothing trained yet
    assert all(abs(row["actor/rollout_is_log_ratio_mean"]) > 1e-6 for row in result.history[1:])
    assert all(row["actor/loss"] == row["actor/loss"] for row in result.history)
