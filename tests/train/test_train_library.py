"""What the trainer takes from its libraries: LR schedules, prompt padding, decoding, the progress bar,
and the one-line error when the ``train`` extra is missing."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rollout_support import TINY_MODEL

from trinity_core.cli.main import main
from trinity_core.lm.sampling import Rollout, decode_completions, encode_prompts
from trinity_core.train import train
from trinity_core.train.learner.optimizer import lr_scheduler
from trinity_core.train.models.policy import build_char_tokenizer


def _factor(kind: str, s: int, warmup: int, total: int) -> float:
    """The documented schedule, written out."""
    if s < warmup:
        return s / warmup
    if kind == "constant":
        return 1.0
    if kind == "linear":
        return (total - s) / (total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * (s - warmup) / (total - warmup)))


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("warmup", [0, 3])
def test_lr_schedules_follow_the_formula(kind: str, warmup: int) -> None:
    total, lr = 10, 0.5
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = lr_scheduler(optimizer, kind, warmup, total)
    used = []
    for _ in range(total):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert used == pytest.approx([lr * _factor(kind, s, warmup, total) for s in range(total)], abs=1e-12)


def test_prompts_are_bos_prefixed_and_left_padded_by_the_tokenizer() -> None:
    tok = build_char_tokenizer("0123456789+=")
    ids, mask = encode_prompts(tok, ["7+8=", "12+3=", "<bos>1+1="], torch.device("cpu"))
    enc = [tok.encode(p, add_special_tokens=False) for p in ["7+8=", "12+3=", "1+1="]]
    bos, pad = tok.bos_token_id, tok.pad_token_id
    assert ids.tolist() == [[pad, bos, *enc[0]], [bos, *enc[1]], [pad, bos, *enc[2]]]
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[False] + [True] * 5, [True] * 6, [False] + [True] * 5]


def test_decode_spells_the_response_before_eos_once_per_distinct_row() -> None:
    tok = build_char_tokenizer("0123456789")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    five, seven = tok.convert_tokens_to_ids(["5", "7"])
    rows = [[five, eos, pad], [five, eos, pad], [seven, five, seven], [pad, eos, pad], [five, eos, pad]]
    rollout = Rollout(
        prompt_ids=torch.ones(5, 1, dtype=torch.long),
        prompt_mask=torch.ones(5, 1, dtype=torch.bool),
        response_ids=torch.tensor(rows),
        response_lengths=torch.tensor([2, 2, 3, 2, 2]),
        truncated=torch.tensor([False, False, True, False, False]),
    )
    calls = []

    def batch_decode(batch: list[list[int]]) -> list[str]:
        calls.append(batch)
        return list(tok.batch_decode(batch))

    texts, ids = decode_completions(SimpleNamespace(batch_decode=batch_decode), rollout)
    assert texts == ["5", "5", "757", "<pad>", "5"]
    assert ids == [(five,), (five,), (seven, five, seven), (pad,), (five,)]  # before EOS, for reward fns
    assert calls == [[[five], [seven, five, seven], [pad]]]


def test_progress_bar_shows_steps_rl_figures_and_speed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "trainer": {"total_steps": 2, "checkpoint_every": 0, "progress": True, "threads": 1},
        "rollout": {"prompts_per_step": 2},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {"eval_size": 0},
        "model": TINY_MODEL,
    }
    train(config, run_dir=tmp_path / "run")
    err = capsys.readouterr().err
    assert "2/2" in err
    assert "step/s" in err
    for figure in ("reward ", "len ", "entropy ", "kl ", "clip ", "gnorm "):
        assert figure in err
    assert "loss " not in err  # the on-policy loss is ~0 at every step: not shown


def test_train_without_the_train_extra_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    assert main(["train"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert "missing: transformers" in lines[0]
    assert "pip install 'trinity-core[train]'" in lines[0]
