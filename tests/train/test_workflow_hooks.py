"""Workflow hooks: ``check_run`` refuses a run before its first step, ``step_metrics`` reach
metrics.jsonl; the scripted engine replies as scripted, ended or cut as a sampled reply."""

from __future__ import annotations

import copy
import json
import string
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from rollout_support import TINY_MODEL

from trinity_core import registry
from trinity_core.cli.main import main
from trinity_core.components import ComponentArgs, Workflow
from trinity_core.experience import Experience
from trinity_core.testing.scripted import ScriptedEngine, scripted_model
from trinity_core.train import train
from trinity_core.train.models.policy import build_char_tokenizer
from trinity_core.workflows import Conversation, WorkflowRunner, make_tasks

CONFIG: dict[str, Any] = {
    "trainer": {"total_steps": 2, "checkpoint_every": 0, "progress": False, "threads": 1, "seed": 0},
    "rollout": {"prompts_per_step": 2, "workflow": "counted"},
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
    "tasks": {"eval_size": 0},
    "model": TINY_MODEL,
}


class Counted(Workflow):
    """One reply per episode, rewarded with its length; reports how many replies were empty."""

    def run(self) -> list[Experience]:
        """One turn."""
        conversation = Conversation(self.model, self.task.prompt)
        reply = conversation.respond()
        return [conversation.to_experience(float(len(reply.response_text or "")))]

    @classmethod
    def step_metrics(cls, experiences: Sequence[Experience]) -> dict[str, float]:
        """``counted/episodes`` and ``counted/empty``."""
        empty = sum(exp.reward == 0 for exp in experiences)
        return {"counted/episodes": float(len(experiences)), "counted/empty": float(empty)}


class Picky(Counted):
    """Refuses every run before it starts."""

    @classmethod
    def check_run(cls, args: ComponentArgs, tokenizer: Any) -> None:
        """Always refuses, naming the tokenizer's size."""
        raise ValueError(f"a tokenizer of {len(tokenizer)} tokens is too small; use a bigger one")


@pytest.fixture
def registered() -> Iterator[None]:
    registry.register("workflow", "counted", Counted, replace=True)
    registry.register("workflow", "picky", Picky, replace=True)
    yield
    registry.unregister("workflow", "counted")
    registry.unregister("workflow", "picky")


def test_step_metrics_reach_metrics_jsonl(tmp_path: Path, registered: None) -> None:
    result = train(copy.deepcopy(CONFIG), run_dir=tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["counted/episodes"] for row in rows] == [4.0, 4.0]  # 2 prompts x 2 runs
    assert all(0 <= row["counted/empty"] <= 4 for row in rows)
    assert [h["counted/episodes"] for h in result.history] == [4.0, 4.0]


def test_check_run_refuses_the_run_with_one_line(
    tmp_path: Path, registered: None, capsys: pytest.CaptureFixture[str]
) -> None:
    config = copy.deepcopy(CONFIG)
    config["rollout"]["workflow"] = "picky"
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("trinity train: error: rollout.workflow_args: workflow 'picky' cannot run: a ")
    assert err[0].endswith("tokens is too small; use a bigger one")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_the_scripted_engine_replies_as_scripted_and_cuts_at_the_budget() -> None:
    tok = build_char_tokenizer(string.digits + "+=ab")
    model = scripted_model(
        tok, lambda prompt: "ab" if prompt.endswith("1+1=") else "abababab", max_new_tokens=4
    )
    short, long = model.generate(["1+1=", "2+2="])
    assert short.response_text == "ab"
    assert short.truncate_status is None
    assert short.tokens is not None
    assert short.tokens[-1] == tok.eos_token_id
    assert long.response_text == "abab"
    assert long.truncate_status == "response_truncated"
    assert long.tokens is not None
    assert len(long.tokens) - long.prompt_length == 4
    assert long.logprobs is not None
    assert long.logprobs.tolist() == [0.0] * 4


def test_scripted_episodes_are_batched_like_sampled_ones() -> None:
    """Three episodes through the runner: one batched call per turn, the script sees each prompt."""
    tok = build_char_tokenizer(string.digits + "+=ab")
    engine = ScriptedEngine(tok, lambda prompt: "a")
    tasks = make_tasks(
        Counted, [{"prompt": f"{i}+{i}="} for i in range(3)], step=0, task_offset=0, repeat_times=1
    )
    outcome = WorkflowRunner("counted", Counted, {}, engine).run(tasks)
    assert outcome.generate_calls == 1
    assert sorted(engine.prompts) == ["<bos>0+0=", "<bos>1+1=", "<bos>2+2="]
    assert [exp.reward for exp in outcome.experiences] == [1.0, 1.0, 1.0]
    assert outcome.metrics()["counted/episodes"] == 3.0
