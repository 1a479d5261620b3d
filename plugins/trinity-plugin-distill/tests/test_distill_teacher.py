"""Both presets train end to end against a teacher (``model.teacher_path``) made by a short SFT run.

The teacher is made the way docs/training.md shows for the embedded default: the task's answers stored
as experiences (:func:`trinity_core.train.data.pairs.write_answer_experiences`), then a
``mode: train`` run
of the ``sft`` preset; its ``model/`` folder is the teacher.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import Qwen2Config, Qwen2ForCausalLM

from trinity_core.config import ConfigError
from trinity_core.train import train
from trinity_core.train.data.pairs import write_answer_experiences

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


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model/ folder of a 40-step SFT run on 512 of the default task's answers."""
    root = tmp_path_factory.mktemp("teacher")
    data = write_answer_experiences(root / "answers", 512)
    config = {
        "mode": "train",
        "algorithm": {"algorithm_type": "sft"},
        "model": MODEL,
        "data": {"experiences": str(data), "batch_size": 64},
        "trainer": {**TRAINER, "total_steps": 40},
        "tasks": {"eval_size": 0},
    }
    result = train(config, run_dir=root / "run")
    nll = [row["actor/sft_loss"] for row in result.history]
    assert nll[-1] < nll[0] - 0.5  # it learned the answers' format at least
    return root / "run" / "model"


def distill(preset: str, teacher: Path, steps: int, run_dir: Path) -> Any:
    config = {
        "algorithm": {"algorithm_type": preset, "repeat_times": 4},
        "model": {**MODEL, "teacher_path": str(teacher)},
        "rollout": {"prompts_per_step": 8},
        "trainer": {**TRAINER, "total_steps": steps},
        "tasks": {"eval_size": 0},
    }
    return train(config, run_dir=run_dir)


def test_on_policy_distill_moves_the_student_toward_the_teacher(teacher: Path, tmp_path: Path) -> None:
    result = distill("on_policy_distill", teacher, 30, tmp_path / "run")

    # kl/mean: the per-response sum of (student - teacher) log-probs of the sampled tokens, a sample
    # of KL(student || teacher); the advantages push it down.
    kl = [row["advantage/kl/mean"] for row in result.history]
    first, last = sum(kl[:5]) / 5, sum(kl[-5:]) / 5
    assert first > 1.0, kl
    assert last < 0.5 * first, kl


def test_jsd_trains_two_steps_on_the_teachers_log_probs(teacher: Path, tmp_path: Path) -> None:
    result = distill("jsd", teacher, 2, tmp_path / "run")

    assert [row["step"] for row in result.history] == [1.0, 2.0]
    for row in result.history:
        # A student that is not the teacher: the JSD surrogate and the advantages are not zero.
        assert row["advantage/jsd/mean"] != 0.0
        assert row["advantage/advantages/mean"] == pytest.approx(-row["advantage/jsd/mean"], rel=1e-5)


def test_a_teacher_with_another_vocabulary_is_refused_before_the_run_dir(tmp_path: Path) -> None:
    config = Qwen2Config(
        vocab_size=7,
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_hidden_layers=1,
    )
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "other")

    with pytest.raises(ConfigError, match=r"model\.teacher_path: the teacher .* vocabulary of 7 tokens"):
        distill("on_policy_distill", tmp_path / "other", 2, tmp_path / "run")
    assert not (tmp_path / "run").exists()
