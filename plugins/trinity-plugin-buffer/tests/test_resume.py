"""A run with ``difficulty_based`` selection, dynamic sampling and replay by ``linear_decay``, killed and
resumed, ends with the weights of an uninterrupted run (the selector's estimates and the replay buffer
travel in the checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from trinity_core import registry
from trinity_core.hooks import HookCallError, get_plugin_manager
from trinity_core.testing.crash import CrashAfter
from trinity_core.train.run import train


def by_length(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Longer responses score more, up to 1."""
    return [min(len(c) / 3, 1.0) for c in completions]


CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 4, "experience_pipeline": [{"name": "dynamic_sampling"}]},
    "tasks": {
        "mix": [{"name": "last_digit", "pool_size": 16}, {"name": "copy", "pool_size": 8, "weight": 0.5}],
        "selector": "difficulty_based",
        "selector_args": {"responses": 4, "temperature": 0.2},
        "reward_fns": ["by_length"],
        "eval_size": 0,
    },
    "buffer": {"replay": {"priority_fn": "linear_decay", "groups_per_step": 1, "max_reuse": 2}},
    "trainer": {
        "total_steps": 5,
        "progress": False,
        "threads": 1,
        "checkpoint_every": 2,
        "keep_checkpoints": 5,
    },
    "model": {
        "config": {
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
        }
    },
}


def test_difficulty_based_selection_with_replay_resumes_bit_identically(tmp_path: Path) -> None:
    registry.register("reward_fn", "by_length", by_length, replace=True)
    straight = tmp_path / "straight"
    first = train(CONFIG, run_dir=straight)
    assert first.history[-1]["buffer/taskset/last_digit/seen_fraction"] > 0
    assert first.history[-1]["buffer/replay/drawn_groups"] == 1.0
    killed, pm = tmp_path / "killed", get_plugin_manager()
    pm.register(CrashAfter(3), name="crash-after-3")
    try:
        with pytest.raises(HookCallError, match="crash-after-3"):
            train(CONFIG, run_dir=killed)
    finally:
        pm.unregister(name="crash-after-3")
    resumed = train(resume=killed)
    a = load_file(str(straight / "checkpoints" / "step-000005" / "model.safetensors"))
    b = load_file(str(killed / "checkpoints" / "step-000005" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    last = {k: v for k, v in first.history[-1].items() if k.startswith("buffer/")}
    assert {k: v for k, v in resumed.history[-1].items() if k.startswith("buffer/")} == last
