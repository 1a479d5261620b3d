"""The TRL example of docs/integrations.md runs as written (CI-sized: 2 steps on the tiny model).

Every fenced ``python`` block of the page carries a ``<!-- test: ENV ... -->`` comment on the line
before it; this file runs the ``trl`` ones, tests/integrations/verl/test_docs_examples.py the ``verl``
ones, so no example goes untested.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="needs trinity-core[trl]")

DOC = Path(__file__).resolve().parents[3] / "docs" / "integrations.md"
_BLOCK = re.compile(r"(?:<!-- test: (?P<env>[\w-]+)[^>]*-->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)


def doc_blocks(lang: str) -> list[tuple[str | None, str]]:
    """``(test env or None, code)`` of every fenced ``lang`` block of docs/integrations.md, in order."""
    return [(m["env"], m["code"]) for m in _BLOCK.finditer(DOC.read_text()) if m["lang"] == lang]


def test_every_python_example_names_its_env() -> None:
    envs = [env for env, _ in doc_blocks("python")]
    assert envs
    assert all(env in ("trl", "verl") for env in envs), envs
    assert "trl" in envs


def test_trl_example_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the example writes to output_dir="out"
    (code,) = [code for env, code in doc_blocks("python") if env == "trl"]
    namespace: dict[str, object] = {"__name__": "docs_example"}
    exec(compile(code, f"{DOC}:trl", "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2  # type: ignore[attr-defined]
    history = trainer.state.log_history  # type: ignore[attr-defined]
    assert math.isfinite(history[-1]["train_loss"])
    assert any("trinity/actor/sapo_loss" in row for row in history)  # the plugin's loss ran
    # The reward is not zero on the random model and differs within every group, so the advantages,
    # the loss and the gradient are not zero: the example trains (an exact-match reward gave 0 loss).
    assert history[-1]["reward"] > 0
    assert history[-1]["frac_reward_zero_std"] == 0
    assert history[-1]["train_loss"] != 0
    from trinity_core.train.models.policy import tiny_model

    before = tiny_model(len(namespace["tokenizer"].get_vocab())).state_dict()  # type: ignore[attr-defined]
    after = trainer.model.state_dict()  # type: ignore[attr-defined]
    assert any(not torch.equal(before[k], after[k].detach().cpu()) for k in before)
