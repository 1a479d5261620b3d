"""What a run shows its user: RL figures on the bar and in the summary, hyperparameters for the trackers,
sample rows, the titled three-panel plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from accelerate.tracking import GeneralTracker
from rollout_support import TINY_MODEL

from trinity_core.cli.main import main
from trinity_core.config import resolve_config
from trinity_core.eid import EID
from trinity_core.experience import Experience
from trinity_core.lm.sampling import Rollout
from trinity_core.train import train
from trinity_core.train.models.policy import build_char_tokenizer
from trinity_core.train.report.plot import plot_figure
from trinity_core.train.report.reporting import (
    SampleLog,
    StepRate,
    format_figures,
    hparams,
    init_trackers,
    rl_figures,
    run_summary,
)

CONFIG: dict[str, Any] = {
    "trainer": {"total_steps": 4, "checkpoint_every": 0, "progress": False, "threads": 1},
    "rollout": {"prompts_per_step": 2},
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
    "tasks": {"eval_size": 0},
    "model": TINY_MODEL,
}


class TableTracker(GeneralTracker):  # type: ignore[misc]
    """A tracker with a table, as wandb's: keeps what it is given."""

    name = "table"
    requires_logging_directory = False

    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, Any] = {}
        self.tables: list[tuple[str, list[str], list[list[Any]], int | None]] = []

    @property
    def tracker(self) -> Any:
        return self

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.config = dict(values)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        pass

    def log_table(
        self, table_name: str, columns: list[str], data: list[list[Any]], step: int | None = None
    ) -> None:
        self.tables.append((table_name, columns, data, step))


def test_rl_figures_pick_the_documented_keys_and_skip_nan() -> None:
    out = {
        "reward/mean": 0.5,
        "response/length": 3.0,
        "actor/entropy_loss": 1.25,
        "actor/ppo_kl": 0.01,
        "actor/kl_loss": 0.02,  # the KL loss term wins over the KL to the sampling policy
        "actor/pg_clipfrac": math.nan,
        "actor/grad_norm": 0.75,
        "actor/loss": 1e-9,
    }
    figures = rl_figures(out)
    assert figures == {"reward": 0.5, "len": 3.0, "entropy": 1.25, "kl": 0.02, "gnorm": 0.75}
    assert format_figures(figures, 2.5) == (
        "reward 0.500 | len 3.0 | entropy 1.250 | kl 0.02 | gnorm 0.750 | 2.50 step/s"
    )
    assert format_figures({"reward": 1.0}) == "reward 1.000"


def test_step_rate_is_windowed() -> None:
    rate = StepRate(window=2)
    rate.start(0.0)
    assert rate.tick(1.0) == 1.0
    assert rate.tick(1.5) == pytest.approx(2 / 1.5)
    # The first step (1 s) has left the window: two steps in 0.5 + 0.25 s.
    assert rate.tick(1.75) == pytest.approx(2 / 0.75)


def test_run_summary_means_the_last_steps() -> None:
    history = [{"reward/mean": float(i), "response/length": 2.0, "time/step_s": 0.5} for i in range(20)]
    history[-1]["time/step_s"] = 1.5
    summary = run_summary(history, window=10)
    assert summary["reward"] == pytest.approx(sum(range(10, 20)) / 10)
    assert summary["len"] == 2.0
    assert summary["steps_per_s"] == pytest.approx(10 / (9 * 0.5 + 1.5))
    assert "entropy" not in summary


def test_hyperparameters_reach_the_trackers_as_flat_scalars() -> None:
    config = resolve_config({**CONFIG, "trainer": {**CONFIG["trainer"], "lr": 1e-3}})
    flat = hparams(config)
    assert flat["trainer/lr"] == 1e-3
    assert flat["algorithm/repeat_times"] == 2
    assert flat["trainer/betas"] == "[0.9, 0.999]"  # a list, as text
    assert all(isinstance(v, bool | int | float | str) for v in flat.values())
    tracker = TableTracker()
    acc = Accelerator(cpu=True, log_with=[tracker])
    init_trackers(acc, config)
    assert tracker.config == flat


def _rollout() -> tuple[Any, Rollout]:
    tok = build_char_tokenizer("0123456789+=")
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    one, two, three = tok.convert_tokens_to_ids(["1", "2", "3"])
    plus, eq = tok.convert_tokens_to_ids(["+", "="])
    prompt = [[pad, bos, one, plus, two, eq]] * 2 + [[bos, one, one, plus, two, eq]] * 2
    rollout = Rollout(
        prompt_ids=torch.tensor(prompt),
        prompt_mask=torch.tensor(prompt) != pad,
        response_ids=torch.tensor([[three, eos], [two, eos], [one, two], [three, pad]]),
        response_lengths=torch.tensor([2, 2, 2, 1]),
        truncated=torch.tensor([False, False, True, False]),
    )
    return tok, rollout


def test_samples_go_to_the_file_and_the_trackers_table_every_n_steps(tmp_path: Path) -> None:
    tok, rollout = _rollout()
    tracker = TableTracker()
    log = SampleLog(tmp_path / "samples.jsonl", 2, tok, [tracker])
    for step in range(4):
        log(step, rollout, [1.0, 0.0, None, 0.0], group_size=2)
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    # Steps 2 and 4 (1-based); the first response of each prompt, special tokens dropped.
    expected = [
        {"step": s, "prompt": p, "completion": c, "reward": r}
        for s in (2, 4)
        for p, c, r in (("1+2=", "3", 1.0), ("11+2=", "12", None))
    ]
    assert rows == expected
    assert [(name, step) for name, _, _, step in tracker.tables] == [("samples", 2), ("samples", 4)]
    assert tracker.tables[0][1] == ["step", "prompt", "completion", "reward"]
    assert tracker.tables[0][2] == [[2, "1+2=", "3", 1.0], [2, "11+2=", "12", None]]
    assert not SampleLog(None, 1, tok, []).due(0)  # processes other than the main write nothing


def test_samples_from_experiences_are_the_rows_the_rollout_gives(tmp_path: Path) -> None:
    # An explorer process hands the learner experiences, not a rollout: the same rows come out of them.
    tok, rollout = _rollout()
    rewards = [1.0, 0.0, None, 0.0]
    experiences = []
    for i in range(4):
        prompt = rollout.prompt_ids[i][rollout.prompt_mask[i]]
        response = rollout.response_ids[i, : int(rollout.response_lengths[i])]
        experiences.append(
            Experience(
                eid=EID(batch=7, task=i // 2, run=i % 2),
                tokens=torch.cat([prompt, response]),
                prompt_length=len(prompt),
                reward=rewards[i],
            )
        )
    SampleLog(tmp_path / "rollout.jsonl", 2, tok, [])(1, rollout, rewards, group_size=2)
    log = SampleLog(tmp_path / "experiences.jsonl", 2, tok, [])
    log.experiences(0, experiences)  # not due: nothing written
    assert not (tmp_path / "experiences.jsonl").exists()
    log.experiences(1, experiences)
    from_rollout, from_experiences = (
        [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        for name in ("rollout.jsonl", "experiences.jsonl")
    )
    assert (
        from_experiences
        == from_rollout
        == [
            {"step": 2, "prompt": "1+2=", "completion": "3", "reward": 1.0},
            {"step": 2, "prompt": "11+2=", "completion": "12", "reward": None},
        ]
    )


def test_a_run_writes_samples_and_reports_rl_figures(tmp_path: Path) -> None:
    config = {**CONFIG, "trainer": {**CONFIG["trainer"], "log_samples_every": 2}}
    result = train(config, run_dir=tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 2, 4, 4]  # 2 prompts a step, one response of each
    assert all(isinstance(r["prompt"], str) and isinstance(r["completion"], str) for r in rows)
    assert all(r["reward"] in (0.0, 1.0) for r in rows)
    last = result.history[-4:]
    assert result.summary["reward"] == pytest.approx(sum(r["reward/mean"] for r in last) / 4)
    assert result.summary["gnorm"] == pytest.approx(sum(r["actor/grad_norm"] for r in last) / 4)
    assert {"len", "entropy", "kl", "clip", "steps_per_s"} <= set(result.summary)
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["last_steps"] == pytest.approx(result.summary)


def test_the_cli_summary_and_log_lines_say_what_rl_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(CONFIG))  # JSON is YAML
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run"), "--debug"]) == 0
    captured = capsys.readouterr()
    summary = next(line for line in captured.out.splitlines() if line.startswith("last 10 steps: "))
    for figure in ("reward ", "len ", "entropy ", "kl ", "clip ", "gnorm ", "step/s"):
        assert figure in summary
    assert "samples.jsonl" in captured.out
    assert "] last 10 steps: reward " in captured.err  # the logger's INFO line, shown with --debug
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "quiet")]) == 0
    assert capsys.readouterr().err == ""  # without --debug stderr holds only warnings and errors


def test_progress_metrics_add_their_keys_to_the_line_and_the_summary(tmp_path: Path) -> None:
    figures = rl_figures({"reward/mean": 1.0, "actor/unmasked_frac": 0.5}, ["actor/unmasked_frac"])
    assert format_figures(figures) == "reward 1.000 | actor/unmasked_frac 0.5"
    assert rl_figures({"reward/mean": 1.0, "x": math.nan}, ["x", "absent"]) == {"reward": 1.0}
    history = [{"reward/mean": 1.0, "actor/pg_loss": v, "time/step_s": 0.5} for v in (1.0, 2.0, 3.0)]
    assert run_summary(history, window=2, extra=["actor/pg_loss"])["actor/pg_loss"] == pytest.approx(2.5)
    config = {**CONFIG, "trainer": {**CONFIG["trainer"], "progress_metrics": ["actor/pg_loss"]}}
    result = train(config, run_dir=tmp_path / "run")
    last = result.history[-4:]
    assert result.summary["actor/pg_loss"] == pytest.approx(sum(r["actor/pg_loss"] for r in last) / 4)


def test_the_plot_is_titled_and_has_reward_length_and_entropy_panels() -> None:
    pytest.importorskip("matplotlib")
    rows = [
        {"step": 1.0, "reward/mean": 0.25, "response/length": 3.0, "actor/entropy_loss": 2.0},
        {"step": 2.0, "reward/mean": 0.75, "response/length": 2.0},
    ]
    fig = plot_figure(rows, "run-7: grpo on last_digit")
    try:
        assert fig._suptitle.get_text() == "run-7: grpo on last_digit"
        assert [ax.get_ylabel() for ax in fig.axes] == ["mean reward", "response length", "entropy"]
        ys = [list(ax.lines[0].get_ydata()) for ax in fig.axes]
        assert ys[0] == [0.25, 0.75]
        assert ys[1] == [3.0, 2.0]
        assert ys[2][0] == 2.0
        assert math.isnan(ys[2][1])  # a gap where the step did not log it
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
