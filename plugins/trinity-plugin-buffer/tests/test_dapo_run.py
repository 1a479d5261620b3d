"""DAPO as the paper runs it: the ``dapo`` preset with clip-higher, dynamic sampling with over-sampling
and the overlong penalty, together in one run (the configuration the preset's docstring gives)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trinity_core import registry
from trinity_core.train.run import train

TINY = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2}


def outcome(prompt: str, completion: str) -> float:
    """DAPO's ±1 outcome: 1 for every response to a prompt whose first operand is odd (a group without
    signal), else 1 for a response of even length and -1 for an odd one."""
    return 1.0 if int(prompt.split("+")[0]) % 2 or len(completion) % 2 == 0 else -1.0


def flat_on_odd_operands(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """:func:`outcome` of each response (the overlong penalty, at most 1, never evens out a group whose
    outcomes differ by 2)."""
    return [outcome(p, c) for p, c in zip(prompts, completions, strict=True)]


DAPO = {
    "algorithm": {
        "algorithm_type": "dapo",
        "repeat_times": 4,
        "policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.28},
    },
    "rollout": {
        "prompts_per_step": 4,
        "max_new_tokens": 6,
        "experience_pipeline": [
            {"name": "dynamic_sampling", "args": {"max_extra_rounds": 8}},
            {"name": "overlong_penalty", "args": {"cache_length": 2}},
        ],
    },
    "tasks": {"eval_size": 0, "reward_fns": ["flat_on_odd_operands"]},
    "trainer": {"total_steps": 3, "progress": False, "threads": 1, "checkpoint_every": 0},
    "model": {"config": {**TINY, "num_hidden_layers": 1}},
}


def test_dapo_with_dynamic_sampling_clip_higher_and_the_overlong_penalty(tmp_path: Path) -> None:
    registry.register("reward_fn", "flat_on_odd_operands", flat_on_odd_operands, replace=True)
    result = train(DAPO, run_dir=tmp_path / "run")
    resolved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    loss_args = resolved["algorithm"]["policy_loss_fn_args"]
    assert (loss_args["clip_range_low"], loss_args["clip_range_high"]) == (0.2, 0.28)
    assert resolved["algorithm"]["kl_loss_fn"] == "none"
    history = result.history
    for row in history:
        assert row["buffer/groups"] == 4.0
        assert row["buffer/zero_variance_groups"] == 0.0
        assert "buffer/overlong_penalty/penalized_fraction" in row
        assert row["buffer/dynamic_sampling/dropped_groups"] >= 0.0
    assert sum(row["buffer/extra_rounds"] for row in history) >= 1
    assert any(row["buffer/overlong_penalty/penalty_mean"] < 0 for row in history)
