"""TRL's own reward functions (``trl.rewards``), unchanged, as trinity reward functions.

``think_format_reward`` reads ``completion[0]["content"]``: it only works on TRL's conversational form,
which trinity passes when the dataset's prompts are conversations (``tasks.args.messages_key``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl", reason="needs trinity-core[trl]")
from trl.rewards import think_format_reward

from trinity_core import registry
from trinity_core.cli.main import main
from trinity_core.train.data.rewards import combine_rewards

TINY = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2}


def test_think_format_reward_scores_trinitys_conversational_completions() -> None:
    conversation = [{"role": "user", "content": "2+2?"}]
    completions = ["<think>\nadd\n</think>\n4", "<think>\nadd, no end\n4", "4"]
    got = combine_rewards(
        [think_format_reward],
        [1.0],
        ["think_format_reward"],
        ["2+2?"] * 3,
        completions,
        {},
        conversations=[conversation] * 3,
    )
    assert got == [1.0, 0.0, 0.0]  # the pattern of its docstring: <think>...</think> then the answer


def test_trinity_train_runs_with_think_format_reward_on_a_messages_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    registry.register("reward_fn", "think_format_reward", think_format_reward)
    rows = [{"messages": [{"role": "user", "content": f"{i}+1="}], "answer": str(i + 1)} for i in range(8)]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = {
        "trainer": {"total_steps": 2, "checkpoint_every": 2, "progress": False, "threads": 1},
        "rollout": {"prompts_per_step": 2},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {
            "name": "dataset",
            "eval_size": 2,
            "reward_fns": ["think_format_reward", "exact_match"],
            "args": {"path": str(data), "messages_key": "messages"},
        },
        "model": {"config": {**TINY, "num_hidden_layers": 1}},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    code = main(["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    assert "trained 2 steps" in capsys.readouterr().out
