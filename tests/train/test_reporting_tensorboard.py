"""TensorBoard has no table: the sample rows reach its text panel as a Markdown table (tag ``samples``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from accelerate import Accelerator
from rollout_support import TINY_MODEL

from trinity_core.config import resolve_config
from trinity_core.train import train
from trinity_core.train.report.reporting import init_trackers, markdown_table

pytest.importorskip("tensorboard", reason="needs tensorboard (Accelerate's tensorboard tracker)")


def text_events(logs: Path, tag: str) -> list[tuple[int, str]]:
    """``(step, text)`` of every text summary ``tag`` under ``logs``, read back as TensorBoard does."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: list[tuple[int, str]] = []
    for events in sorted(logs.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"tensors": 0})
        acc.Reload()
        if f"{tag}/text_summary" in acc.Tags()["tensors"]:
            for event in acc.Tensors(f"{tag}/text_summary"):
                found.append((event.step, event.tensor_proto.string_val[0].decode()))
    return found


def test_markdown_table_escapes_pipes_and_line_breaks() -> None:
    table = markdown_table(["prompt", "reward"], [["a|b\nc", 1.0], ["d", None]])
    assert table.splitlines() == [
        "| prompt | reward |",
        "| --- | --- |",
        "| a\\|b<br>c | 1.0 |",
        "| d | None |",
    ]


def test_a_run_logs_its_sample_rows_to_tensorboards_text_panel(tmp_path: Path) -> None:
    config: dict[str, Any] = {
        "trainer": {
            "total_steps": 2,
            "checkpoint_every": 2,
            "progress": False,
            "threads": 1,
            "trackers": ["tensorboard"],
            "log_samples_every": 1,
        },
        "rollout": {"prompts_per_step": 2},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {"name": "addmod", "eval_size": 2},
        "model": TINY_MODEL,
    }
    run = tmp_path / "run"
    train(config, run_dir=run)
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    events = text_events(run / "logs", "samples")
    assert [step for step, _ in events] == [1, 2]
    for step, text in events:
        written = [r for r in rows if r["step"] == step]
        columns = ["step", "prompt", "completion", "reward"]
        assert text == markdown_table(columns, [[r[c] for c in columns] for r in written])


def test_the_tensorboard_writer_queue_holds_a_steps_metrics(tmp_path: Path) -> None:
    """Each metric is one TensorBoard event; a queue of TensorBoard's default 10 made the training thread
    wait on the writer thread every step. The run's tracker is started with a queue of 1,000."""
    accelerator = Accelerator(log_with="tensorboard", project_dir=str(tmp_path))
    init_trackers(accelerator, resolve_config(None))
    (tracker,) = accelerator.trackers
    assert tracker.writer.max_queue == 1000
    accelerator.end_training()
