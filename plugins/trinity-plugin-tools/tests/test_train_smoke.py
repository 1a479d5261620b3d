"""A few steps of the tools workflow through ``trinity train`` (learning: benchmarks/bench_tools.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from test_bad_input import config

from trinity_core.cli.main import main


def test_trinity_train_runs_the_tools_workflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("trinity_plugin_grpo", reason="the preset's plugin (the test extra) is not installed")
    cfg = config(max_turns=2)
    cfg["rollout"]["max_new_tokens"] = 16
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 0
    assert "trained 2 steps" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["workflow/episodes"] == 4.0  # 2 prompts x 2 runs
        assert row["workflow/failed_episodes"] == 0.0
        assert 1.0 <= row["tools/turns"] <= 2.0
        assert row["workflow/generate_calls"] == row["workflow/turns_max"]
        for key in ("tools/calls_per_episode", "tools/error_rate", "tools/parse_error_rate", "actor/pg_loss"):
            assert math.isfinite(row[key]), key
