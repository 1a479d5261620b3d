"""docs/workflows.md's evaluation of a trained multi-turn policy runs as written, on a 2-step FrozenLake run
(the block plays the gym workflow with the run's model on held-out rows and prints the success rate)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gym_support import config

from trinity_core.train.run import train

DOC = Path(__file__).resolve().parents[3] / "docs" / "workflows.md"
BLOCK = re.compile(r"<!-- test: gym [^>]*-->\n```python\n(.*?)```", re.S)


def test_the_evaluation_example_plays_the_trained_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the example reads runs/frozen
    result = train(config("grpo", 2), run_dir=tmp_path / "runs" / "frozen")
    assert result.steps == 2
    [code] = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": "docs_example"}
    exec(compile(code, f"{DOC}:gym", "exec"), namespace)
    outcome = namespace["outcome"]
    assert not outcome.failures  # type: ignore[attr-defined]
    assert len(outcome.experiences) == 64  # type: ignore[attr-defined]  # one per held-out episode
    assert all(e.experience_type == "multi_turn" for e in outcome.experiences)  # type: ignore[attr-defined]
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"success \d\.\d{3}, mean return -?\d\.\d{3}, failed episodes 0", line), line
