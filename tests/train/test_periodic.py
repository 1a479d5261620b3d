"""``trainer.export_every`` and ``trainer.eval_every``: the model folder and the eval figures mid-run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rollout_support import TINY_MODEL
from safetensors.torch import load_file

from trinity_core.cli.main import main
from trinity_core.train import train
from trinity_core.train.modes import periodic

TIMINGS = ("eval/", "time/", "throughput/", "explorer/idle", "learner/idle")


def _deterministic(row: dict[str, float]) -> dict[str, float]:
    """A step's metrics without the timings (and the eval figures of eval_every)."""
    return {k: v for k, v in row.items() if not k.startswith(TIMINGS)}


def _config(**trainer: Any) -> dict[str, Any]:
    return {
        "model": TINY_MODEL,
        "tasks": {"eval_size": 8, "eval_k": 2},
        "rollout": {"prompts_per_step": 4},
        "algorithm": {"repeat_times": 4},
        "trainer": {
            "total_steps": 4,
            "checkpoint_every": 2,
            "progress": False,
            "threads": 1,
            "trackers": [],
            **trainer,
        },
    }


def test_export_every_writes_the_weights_of_that_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies: list[Path] = []
    save = periodic.save_policy

    def keep_a_copy(*args: Any, **kwargs: Any) -> Path:
        out = save(*args, **kwargs)
        copies.append(Path(shutil.copytree(out, tmp_path / f"export-{len(copies)}")))
        return out

    monkeypatch.setattr(periodic, "save_policy", keep_a_copy)
    run = tmp_path / "run"
    train(_config(export_every=2, eval_every=2), run_dir=run)
    assert len(copies) == 2  # after step 2 (export_every), after step 4 (the end of the run)
    for copy, step in zip(copies, (2, 4), strict=True):
        exported = load_file(str(copy / "model.safetensors"))
        trained = load_file(str(run / "checkpoints" / f"step-{step:06d}" / "model.safetensors"))
        assert set(trained) <= set(exported)
        assert all(exported[k].equal(trained[k]) for k in trained), step
    assert (run / "model" / "config.json").is_file()

    # trinity eval of the step-2 checkpoint: the figures the trainer logged at step 2.
    assert main(["eval", str(run), "--step", "2", "--output", str(tmp_path / "step2.json")]) == 0
    result = json.loads((tmp_path / "step2.json").read_text())
    assert result["model"] == str(run / "checkpoints" / "step-000002")
    logged = json.loads((run / "metrics.jsonl").read_text().splitlines()[1])
    assert result["figures"] == {k: v for k, v in logged.items() if k.startswith("eval/")}


def test_eval_every_logs_the_figures_and_leaves_training_as_it_was(tmp_path: Path) -> None:
    evaluated = train(_config(eval_every=2), run_dir=tmp_path / "eval")
    plain = train(_config(), run_dir=tmp_path / "plain")
    rows = [json.loads(line) for line in (tmp_path / "eval" / "metrics.jsonl").read_text().splitlines()]
    with_eval = [r["step"] for r in rows if "eval/greedy_reward" in r]
    assert with_eval == [2.0, 4.0]
    for row in rows:
        if "eval/greedy_reward" in row:
            assert row["eval/prompts"] == 8.0
            assert 0.0 <= row["eval/pass@1"] <= row["eval/pass@2"] <= 1.0
    # The final greedy figure is the run's greedy accuracy; evaluating drew nothing from training's RNG.
    assert rows[-1]["eval/greedy_reward"] == evaluated.eval_accuracy
    assert [_deterministic(r) for r in evaluated.history] == [_deterministic(r) for r in plain.history]
