"""``--resume``: a run killed after N steps and resumed reaches the parameters of an uninterrupted run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from reliability_driver import register_length_reward
from safetensors.torch import load_file

from trinity_core.hooks import HookCallError, get_plugin_manager
from trinity_core.testing.crash import Crash, CrashAfter
from trinity_core.train import train

CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 4},
    # Rewards that vary between responses, so that every step changes the weights (with exact_match a
    # random model earns 0 everywhere: no update, and a resume that restored nothing would still match).
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "trainer": {
        "total_steps": 5,
        "checkpoint_every": 2,
        "keep_checkpoints": 5,
        "progress": False,
        "threads": 1,
        "epochs": 2,
        "minibatches": 2,
        "lr_scheduler": "cosine",
        "warmup_steps": 2,
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


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / "step-000005" / "model.safetensors"))


def test_killed_and_resumed_run_matches_uninterrupted_run(tmp_path: Path) -> None:
    register_length_reward()
    straight = tmp_path / "straight"
    train(CONFIG, run_dir=straight)

    killed = tmp_path / "killed"
    pm = get_plugin_manager()
    crash = CrashAfter(3)
    pm.register(crash, name="crash-after-3")
    try:
        with pytest.raises(HookCallError, match="crash-after-3") as failure:
            train(CONFIG, run_dir=killed)
        assert isinstance(failure.value.__cause__, Crash)
    finally:
        pm.unregister(name="crash-after-3")
    # Killed during step 3's aftermath: the last complete checkpoint is step 2, and a half-written
    # checkpoint directory is lying around.
    assert (killed / "checkpoints" / "latest").read_text() == "step-000002"
    partial = killed / "checkpoints" / ".tmp-step-000004"
    shutil.copytree(killed / "checkpoints" / "step-000002", partial)
    (partial / "model.safetensors").write_bytes(b"corrupt")

    train(resume=killed)
    a, b = final_weights(straight), final_weights(killed)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1.0, 2.0, 3.0, 4.0, 5.0]  # step 3 replayed once, not duplicated
    straight_rows = (straight / "metrics.jsonl").read_text().splitlines()
    killed_rows = (killed / "metrics.jsonl").read_text().splitlines()
    for x, y in zip(straight_rows, killed_rows, strict=True):
        rx, ry = json.loads(x), json.loads(y)
        assert rx["reward/mean"] == ry["reward/mean"]
        assert rx["actor/loss"] == pytest.approx(ry["actor/loss"], rel=1e-6, abs=1e-9)


@pytest.mark.parametrize(
    "sync",
    [{"sync_offset": 1, "sync_interval": 1}, {"sync_offset": 2, "sync_interval": 2}],
    ids=["offset-1", "offset-2-interval-2"],
)
def test_an_explorer_ahead_of_the_learner_resumes_bit_for_bit(tmp_path: Path, sync: dict[str, int]) -> None:
    """With the explorer in a thread ``sync_offset`` steps ahead, a checkpoint keeps the rollouts made for
    the next steps and the explorer's weights: the resumed run is the uninterrupted one, bit for bit."""
    register_length_reward()
    config = {
        **CONFIG,
        "trainer": {**CONFIG["trainer"], "checkpoint_every": 1},
        "synchronizer": sync,
    }
    straight = tmp_path / "straight"
    train(config, run_dir=straight)
    killed = tmp_path / "killed"
    pm = get_plugin_manager()
    pm.register(CrashAfter(2), name="crash-after-2")
    try:
        with pytest.raises(HookCallError, match="crash-after-2"):
            train(config, run_dir=killed)
    finally:
        pm.unregister(name="crash-after-2")
    assert (killed / "checkpoints" / "step-000002" / "explorer-0.safetensors").is_file()
    train(resume=killed)
    a, b = final_weights(straight), final_weights(killed)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    rows = [
        [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for run in (straight, killed)
    ]
    for key in ("reward/mean", "actor/loss", "staleness/mean"):
        assert [r[key] for r in rows[0]] == [r[key] for r in rows[1]], key
