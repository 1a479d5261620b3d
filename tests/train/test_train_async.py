"""Mode async: the explorer in its own process learns, syncs weights by either method, bounds staleness."""

from __future__ import annotations

import copy
import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL

from trinity_core.train import train

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes

CONFIG: dict[str, Any] = {
    "mode": "async",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 4},
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "trainer": {"total_steps": 6, "checkpoint_every": 0, "progress": False, "threads": 1, "seed": 1},
    "model": TINY_MODEL,
}


def _with(**sync: Any) -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    config["synchronizer"] = sync
    return config


@pytest.fixture(autouse=True)
def _length_reward() -> None:
    register_length_reward()


@pytest.mark.parametrize(("method", "offset", "interval"), [("memory", 1, 1), ("checkpoint", 2, 2)])
def test_staleness_is_bounded_by_the_link_and_the_interval(
    tmp_path: Path, method: str, offset: int, interval: int
) -> None:
    # The explorer puts step e only when the link (max(offset, 1) steps) has room, so the learner has
    # finished step e - capacity - 1; the weights it then holds are at most interval - 1 versions older.
    config = _with(method=method, sync_offset=offset, sync_interval=interval)
    result = train(config, run_dir=tmp_path / "run")
    staleness = [row["staleness/max"] for row in result.history]
    assert len(staleness) == 6
    assert staleness[0] == 0.0  # the first rollout uses the initial weights, published before the spawn
    assert max(staleness) <= max(offset, 1) + interval
    assert all(0.0 <= row["learner/idle_fraction"] <= 1.0 for row in result.history)
    assert all(0.0 <= row["explorer/idle_fraction"] <= 1.0 for row in result.history)
    assert not multiprocessing.active_children()  # the explorer process is gone
    if method == "checkpoint":
        raw = (tmp_path / "run" / "sync" / "policy.safetensors").read_bytes()
        header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
        assert header["__metadata__"]["version"] == "6"  # the last publish: after the 6th update


def test_async_learns_to_copy(tmp_path: Path) -> None:
    config = {
        "mode": "async",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 8, "kl_loss_fn": "none"},
        "tasks": {"name": "copy", "args": {"length": 2, "letters": "abc"}, "eval_size": 0},
        "rollout": {"prompts_per_step": 16},
        "trainer": {"total_steps": 150, "lr": 5e-4, "checkpoint_every": 0, "progress": False, "seed": 0},
        "synchronizer": {"sync_offset": 1},
    }
    result = train(config, run_dir=tmp_path / "copy")
    rewards = [row["reward/mean"] for row in result.history]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last >= first + 0.3, f"first 10 steps {first:.3f}, last 10 {last:.3f}; curve {result.reward_curve}"
    assert max(row["staleness/max"] for row in result.history) <= 2.0


def test_async_trains_lora_adapters_with_the_explorer_loading_them_by_name(tmp_path: Path) -> None:
    config = _with(sync_offset=1)
    config["model"] = {**TINY_MODEL, "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
    result = train(config, run_dir=tmp_path / "run")
    # The explorer process builds its policy with the same adapters, so every published version loads.
    assert len(result.history) == 6
    assert all(row["actor/loss"] == row["actor/loss"] for row in result.history)  # finite, not NaN
    assert max(row["staleness/max"] for row in result.history) <= 2.0
    assert not multiprocessing.active_children()
