"""``mix`` and ``mix_chord`` train end to end with expert data (``data.expert_path``) in mode both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from trinity_core import registry
from trinity_core.train import train
from trinity_core.train.data.pairs import pair_experiences, write_answer_experiences
from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.models.policy import load_policy

MODEL: dict[str, Any] = {
    "config": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
    }
}
TRAINER = {"checkpoint_every": 0, "progress": False, "threads": 1, "lr": 3e-3}


def run(preset: str, expert: Path, steps: int, run_dir: Path, **loss_args: Any) -> Any:
    config = {
        "algorithm": {"algorithm_type": preset, "repeat_times": 2, "policy_loss_fn_args": loss_args},
        "model": MODEL,
        "data": {"expert_path": str(expert)},
        "rollout": {"prompts_per_step": 4},
        "trainer": {**TRAINER, "total_steps": steps},
        "tasks": {"eval_size": 0},
    }
    return train(config, run_dir=run_dir)


def expert_nll(model: Any, tokenizer: Any, rows: list[dict[str, str]]) -> float:
    """Mean negative log-likelihood per response token of the expert responses under ``model``."""
    exps = pair_experiences(tokenizer, [r["prompt"] for r in rows], [r["response"] for r in rows])
    P = exps[0].prompt_length
    assert all(e.prompt_length == P for e in exps)  # last_digit prompts share a length
    ids = torch.stack([e.tokens for e in exps]).long()
    with torch.no_grad():
        logp = response_logprobs(model, ids, None, P, False)[0]
    return float(-logp.mean())


def test_mix_learns_the_expert_responses(tmp_path: Path) -> None:
    task = registry.create("task", "last_digit", {})
    rows = [{"prompt": r["prompt"], "response": r["answer"]} for r in task.sample(32, torch.Generator())]
    expert = tmp_path / "expert.jsonl"
    expert.write_text("".join(json.dumps(r) + "\n" for r in rows))
    initial, tokenizer = load_policy(None, None, MODEL["config"], task.alphabet(), seed=0)
    before = expert_nll(initial, tokenizer, rows)

    # mu = 0.5: half of the loss is SFT on the expert rows (the preset's default is 0.1).
    result = run("mix", expert, 20, tmp_path / "run", mu=0.5)

    after = expert_nll(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model"), tokenizer, rows)
    assert after < 0.7 * before, (before, after)
    sft = [row["actor/expert/sft_loss"] for row in result.history]
    assert sft[-1] < sft[0]


def test_mix_chord_trains_two_steps_on_stored_experiences(tmp_path: Path) -> None:
    stored = write_answer_experiences(tmp_path / "stored", 16)

    result = run("mix_chord", stored, 2, tmp_path / "run", mu_peak=0.3, mu_valley=0.3)

    assert [row["step"] for row in result.history] == [1.0, 2.0]
    for row in result.history:
        assert row["actor/mu"] == pytest.approx(0.3)  # no warm-up or decay: the valley from step 0
        assert row["actor/expert/sft_phi_loss"] > 0.0
