"""Every installed preset either trains two steps with what it needs, or is refused up front without it.

What a preset needs is read from the refusal itself: each problem of ``trinity config validate`` names
the config key that supplies the missing piece, and :data:`SUPPLY` says how this test supplies that key.
A preset whose refusal names a key missing from :data:`SUPPLY` fails the test: its need is undocumented.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from rollout_support import TINY_MODEL

from trinity_core import registry
from trinity_core.buffer import make_buffer
from trinity_core.cli.main import main
from trinity_core.config import ConfigError, ModelConfig, resolve_config
from trinity_core.config.capabilities import check_capabilities
from trinity_core.eid import EID
from trinity_core.experience import Experience
from trinity_core.train import train
from trinity_core.train.data.pairs import write_answer_experiences
from trinity_core.train.models.policy import build_char_tokenizer

PRESETS = sorted(registry.get_registry().names("algorithm"))
HAS_CRITIC = "critic_path" in ModelConfig.model_fields  # the critic of issue 14 (another branch)

BASE: dict[str, Any] = {
    "trainer": {"total_steps": 2, "checkpoint_every": 0, "progress": False, "threads": 1},
    "rollout": {"prompts_per_step": 2},
    "tasks": {"eval_size": 2},
    "model": TINY_MODEL,
    "data": {"batch_size": 4},
}


def config_for(preset: str, **sections: dict[str, Any]) -> dict[str, Any]:
    """The tiny two-step run of ``preset`` with ``sections`` merged per section over :data:`BASE`."""
    out: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
    out["algorithm"] = {"algorithm_type": preset}
    for key, value in sections.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def refusals(config: dict[str, Any]) -> list[Any]:
    """The problems ``trinity config validate`` reports for ``config`` (resolution, then capabilities)."""
    try:
        check_capabilities(resolve_config(config))
    except ConfigError as err:
        return err.problems
    return []


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny SFT-trained teacher, expert pairs (jsonl), SFT experiences and DPO pairs."""
    root = tmp_path_factory.mktemp("parts")
    answers = write_answer_experiences(root / "answers", 32)
    teacher_run = root / "teacher"
    train(
        config_for("sft", mode="train", data={"experiences": str(answers), "batch_size": 8}),
        run_dir=teacher_run,
    )
    task = registry.create("task", "last_digit", {})
    rows = task.sample(16, torch.Generator().manual_seed(3))
    expert = root / "expert.jsonl"
    expert.write_text(
        "".join(json.dumps({"prompt": r["prompt"], "response": r["answer"]}) + "\n" for r in rows)
    )
    tok = build_char_tokenizer(task.alphabet())

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    pairs = [
        Experience(
            eid=EID(task=i),
            tokens=[tok.bos_token_id, *enc(r["prompt"])],
            chosen=[*enc(r["answer"]), tok.eos_token_id],
            rejected=[*enc(str((int(r["answer"]) + 1) % 10)), tok.eos_token_id],
        )
        for i, r in enumerate(rows)
    ]
    writer = make_buffer("disk", str(root / "pairs")).writer
    asyncio.run(writer.write(pairs))
    return {
        "teacher": teacher_run / "model",
        "expert": expert,
        "answers": answers,
        "pairs": root / "pairs",
    }


def supply(key: str, preset: str, parts: dict[str, Path]) -> dict[str, Any]:
    """The config sections that supply ``key`` for ``preset``."""
    schema = registry.resolve("algorithm", preset).schema
    stored = parts["pairs"] if schema == "dpo" else parts["answers"]
    return {
        "model.teacher_path": {"model": {**TINY_MODEL, "teacher_path": str(parts["teacher"])}},
        "data.expert_path": {"data": {"expert_path": str(parts["expert"])}},
        "algorithm": {"mode": "train", "data": {"experiences": str(stored), "batch_size": 4}},
    }[key]


SUPPLY_KEYS = ("model.teacher_path", "data.expert_path", "algorithm")
"""Config keys a refusal may name, and this test knows how to supply ("algorithm": a preset rule that
asks for mode train on data.experiences)."""


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_trains_two_steps_or_is_refused_with_the_key_that_supplies_its_need(
    preset: str, parts: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = config_for(preset)
    problems = refusals(bare)
    sections: dict[str, Any] = {}
    for problem in problems:
        assert problem.path in SUPPLY_KEYS, f"{preset}: refused for an unknown need: {problem}"
        assert "\n" not in str(problem)
        sections.update(supply(problem.path, preset, parts))
    if problems:
        # The same refusal from the CLI and from trinity train, which writes nothing.
        path = tmp_path / "bare.yaml"
        path.write_text(yaml.safe_dump(bare))
        assert main(["config", "validate", str(path)]) == 1
        err = capsys.readouterr().err
        # One problem is one line; several are listed, one per line.
        assert all(f"{p.path}: " in err for p in problems), err
        assert len(err.strip().splitlines()) == (1 if len(problems) == 1 else len(problems) + 1), err
        with pytest.raises(ConfigError):
            train(bare, run_dir=tmp_path / "refused")
        assert not (tmp_path / "refused").exists()
    config = config_for(preset, **sections)
    assert refusals(config) == [], f"{preset}: still refused after supplying {sorted(sections)}"
    if registry.resolve("algorithm", preset).use_critic and not HAS_CRITIC:
        pytest.skip(f"{preset}: the trainer has no critic yet (model.critic_path, issue 14 point 1)")

    result = train(config, run_dir=tmp_path / "run")

    assert [row["step"] for row in result.history] == [1.0, 2.0]
    assert all(math.isfinite(row["actor/loss"]) for row in result.history)


def test_presets_with_needs_name_the_key_that_supplies_them() -> None:
    """The distillation presets need a teacher and the MIX presets expert data, each said in one line."""
    expected = {
        "on_policy_distill": "model.teacher_path",
        "jsd": "model.teacher_path",
        "mix": "data.expert_path",
        "mix_chord": "data.expert_path",
    }
    for preset, key in expected.items():
        problems = refusals(config_for(preset))
        assert [p.path for p in problems] == [key], preset
        assert "which this run lacks" in problems[0].message
