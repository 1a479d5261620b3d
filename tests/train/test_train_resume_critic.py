"""``--resume`` with a critic: a killed and resumed ``ppo`` run reaches the parameters (policy, critic and
the critic's optimizer) of an uninterrupted run, bit for bit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from reliability_driver import register_length_reward
from safetensors.torch import load_file
from test_train_resume import Crash, CrashAfter

from trinity_core.hooks import HookCallError, get_plugin_manager
from trinity_core.train import train
from trinity_core.train.checkpoints.commit import CheckpointError

CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "ppo", "repeat_times": 4},
    "rollout": {"prompts_per_step": 4},
    # Rewards that vary between responses, so that every step changes both models.
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "critic": {"warmup_steps": 1, "lr": 1e-3},
    "trainer": {
        "total_steps": 5,
        "checkpoint_every": 2,
        "keep_checkpoints": 5,
        "progress": False,
        "threads": 1,
        "epochs": 2,
        "minibatches": 2,
    },
    "model": {
        "config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
        }
    },
}
FILES = ("model.safetensors", "model_1.safetensors")  # Accelerate's names: the policy, the critic


def final(run: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / "step-000005" / name))


def test_killed_and_resumed_ppo_run_matches_uninterrupted_run(tmp_path: Path) -> None:
    register_length_reward()
    straight = tmp_path / "straight"
    train(CONFIG, run_dir=straight)

    killed = tmp_path / "killed"
    pm = get_plugin_manager()
    pm.register(CrashAfter(3), name="crash-after-3")
    try:
        with pytest.raises(HookCallError, match="crash-after-3") as failure:
            train(CONFIG, run_dir=killed)
        assert isinstance(failure.value.__cause__, Crash)
    finally:
        pm.unregister(name="crash-after-3")
    assert (killed / "checkpoints" / "latest").read_text() == "step-000002"

    train(resume=killed)
    for name in FILES:
        a, b = final(straight, name), final(killed, name)
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(b[key], a[key], rtol=0, atol=0, msg=f"{name}: {key}")
    opt_a, opt_b = (
        torch.load(run / "checkpoints" / "step-000005" / "optimizer_1.bin", weights_only=True)
        for run in (straight, killed)
    )  # the critic's optimizer (Accelerate's second)
    for idx, state in opt_a["state"].items():
        for key, value in state.items():
            torch.testing.assert_close(opt_b["state"][idx][key], value, rtol=0, atol=0, msg=f"{idx}.{key}")
    rows = [
        [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for run in (straight, killed)
    ]
    assert [r["step"] for r in rows[1]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    for x, y in zip(*rows, strict=True):
        assert x["critic/vf_loss"] == y["critic/vf_loss"]
        assert x["reward/mean"] == y["reward/mean"]


def test_resume_without_the_critic_files_is_refused(tmp_path: Path) -> None:
    register_length_reward()
    run = tmp_path / "run"
    train({**CONFIG, "trainer": {**CONFIG["trainer"], "total_steps": 2}}, run_dir=run)
    (run / "checkpoints" / "step-000002" / "model_1.safetensors").unlink()
    (run / "checkpoints" / "step-000002" / "manifest.json").unlink()  # as an older checkpoint would be
    with pytest.raises(CheckpointError, match=r"holds no critic \(model_1.safetensors missing\)"):
        train(resume=run, overrides=["trainer.total_steps=3"])
