"""Issue 19 with real processes: two runs into one directory, kill -9 at several points, a quiet exit.

Each ``trinity train`` here is a subprocess of ``reliability_driver.py`` (a pause point to kill at).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL
from safetensors.torch import load_file

from trinity_core.cli.main import main

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes

DRIVER = Path(__file__).with_name("reliability_driver.py")
CONFIG = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 2},
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "trainer": {
        "total_steps": 6,
        "checkpoint_every": 2,
        "keep_checkpoints": 5,
        "progress": False,
        "threads": 1,
    },
    "model": TINY_MODEL,
}
WAIT_S = 240  # a loaded CI machine needs a while to import torch


def start(
    args: list[str | Path], pause: str | None = None, marker: Path | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if pause is not None:
        env.update(PAUSE=pause, MARKER=str(marker))
    return subprocess.Popen(
        [sys.executable, str(DRIVER), *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(marker: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not marker.exists():
        if process.poll() is not None:
            pytest.fail(f"the run ended before {marker.name}: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the run did not reach {marker.name}")
        time.sleep(0.05)


def kill_at(args: list[str | Path], pause: str, tmp_path: Path) -> None:
    marker = tmp_path / pause.replace(":", "-")
    process = start(args, pause, marker)
    wait_for(marker, process)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    return path


def metric_steps(run: Path) -> list[float]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_concurrent_runs_into_one_dir(config_file: Path, tmp_path: Path) -> None:
    run, marker = tmp_path / "run", tmp_path / "paused"
    first = start(
        ["--config", config_file, "--run-dir", run, "--set", "trainer.total_steps=3"], "after_step:1", marker
    )
    wait_for(marker, first)  # the first run is between steps, holding the lock
    second = subprocess.run(
        [sys.executable, str(DRIVER), "--config", str(config_file), "--run-dir", str(run)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    (tmp_path / "paused.go").touch()
    _, err = first.communicate(timeout=WAIT_S)
    assert second.returncode == 1
    assert second.stderr == (
        f"trinity train: error: run directory {run} is in use by another trinity train (it holds "
        f"{run / '.lock'}); wait for that run to end, or choose another --run-dir\n"
    )
    assert first.returncode == 0, err
    assert metric_steps(run) == [1.0, 2.0, 3.0]  # written once, by the first run


def test_an_error_ends_the_process_quietly(config_file: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "tasks": {"eval_size": 0}}))  # built-ins only
    done = subprocess.run(
        [Path(sys.executable).with_name("trinity"), "train", "--resume", run],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"trinity train: error: --resume {run}: no complete checkpoint in {run / 'checkpoints'}; start a new "
        "run (--overwrite) instead\n"
    )


def test_kill_9_at_several_points_then_resume_matches_an_uninterrupted_run(
    config_file: Path, tmp_path: Path
) -> None:
    register_length_reward()
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert main(["train", "--config", str(config_file), "--run-dir", str(straight)]) == 0

    kill_at(["--config", config_file, "--run-dir", run], "after_step:3", tmp_path)
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"
    assert metric_steps(run) == [1.0, 2.0, 3.0]

    kill_at(["--resume", run], "in_save:4", tmp_path)  # half of step 4's model file written
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"
    assert (run / "checkpoints" / ".tmp-step-000004" / "model.safetensors").exists()

    kill_at(["--resume", run], "in_commit:6", tmp_path)  # step-000006 in place, `latest` not updated
    assert (run / "checkpoints" / "latest").read_text() == "step-000004"
    assert (run / "checkpoints" / "step-000006").is_dir()

    assert main(["train", "--resume", str(run)]) == 0
    assert metric_steps(run) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    a = load_file(str(straight / "checkpoints" / "step-000006" / "model.safetensors"))
    b = load_file(str(run / "checkpoints" / "step-000006" / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    first = load_file(str(straight / "checkpoints" / "step-000002" / "model.safetensors"))
    assert any(not torch.equal(first[k], a[k]) for k in a)  # the steps after the kills did train
