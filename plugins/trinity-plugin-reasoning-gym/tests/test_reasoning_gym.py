"""reasoning-gym as a task set: rows, the generator's own scoring, bad configurations, and GRPO learning."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trinity_plugin_reasoning_gym import ReasoningGymTask, reasoning_gym_score

from trinity_core import registry
from trinity_core.config import ConfigError
from trinity_core.train.run import train

CHAIN = {"dataset": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}


def test_rows_carry_the_question_answer_and_entry() -> None:
    task = ReasoningGymTask(**CHAIN, size=20, prompt_template="Q: {question}")
    rows = task.sample(4, torch.Generator().manual_seed(0))
    for row in rows:
        entry = row["entry"]
        assert row["prompt"] == "Q: " + entry["question"]
        assert row["answer"] == str(entry["answer"])
        left, op, right = entry["metadata"]["expression"].split()
        assert int(row["answer"]) == (int(left) + int(right) if op == "+" else int(left) - int(right))
    assert set("".join(r["prompt"] + r["answer"] for r in rows)) <= set(task.alphabet())
    assert task.max_response_tokens() <= 3  # "-8" or "18", then EOS


def test_the_generators_own_score_answer_is_the_reward() -> None:
    rows = ReasoningGymTask(**CHAIN, size=5).sample(2, torch.Generator().manual_seed(0))
    entries = [r["entry"] for r in rows]
    right = [r["answer"] for r in rows]
    assert reasoning_gym_score(right, entries) == [1.0, 1.0]
    assert reasoning_gym_score([f" {a} " for a in right], entries) == [1.0, 1.0]
    assert reasoning_gym_score(["x", "99"], entries) == [0.0, 0.0]
    assert reasoning_gym_score(right, entries, truncated=[True, False]) == [0.0, 1.0]


def test_an_unknown_generator_is_refused_when_the_task_is_built() -> None:
    with pytest.raises(ValueError, match=r"reasoning-gym cannot build dataset 'no_such_generator'"):
        registry.create("task", "reasoning_gym", {"dataset": "no_such_generator"})


def test_an_unknown_generator_fails_before_training(tmp_path: Path) -> None:
    pytest.importorskip("trinity_plugin_grpo", reason="the default preset's plugin (the test extra)")
    config = {"tasks": {"name": "reasoning_gym", "args": {"dataset": "no_such_generator"}}}
    with pytest.raises(ConfigError, match=r"reasoning-gym cannot build dataset 'no_such_generator'"):
        train(config, run_dir=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_grpo_learns_a_reasoning_gym_task(tmp_path: Path) -> None:
    """gcd: a tiny model that starts scoring 0 answers a quarter or more of the last steps' questions
    within 40 steps (most gcds are 1 or 2: it learns the answer format and the common answers)."""
    pytest.importorskip("trinity_plugin_grpo", reason="the preset's plugin (the test extra) is not installed")
    config = {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 8, "kl_loss_fn": "none"},
        "tasks": {"name": "reasoning_gym", "eval_size": 32, "args": {"dataset": "gcd", "size": 200}},
        "rollout": {"prompts_per_step": 16},
        "trainer": {
            "total_steps": 40,
            "lr": 1e-2,
            "checkpoint_every": 0,
            "progress": False,
            "threads": 1,
            "seed": 0,
        },
        "model": {
            "config": {
                "hidden_size": 16,
                "intermediate_size": 32,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "num_hidden_layers": 1,
                "max_position_embeddings": 256,
            }
        },
    }
    result = train(config, run_dir=tmp_path / "gcd")
    rewards = [h["reward/mean"] for h in result.history]
    assert sum(rewards[:10]) / 10 < 0.05
    assert max(rewards[-5:]) >= 0.2, rewards
    assert result.eval_accuracy is not None
    assert result.eval_accuracy >= 0.25
