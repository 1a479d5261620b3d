"""Mode async faults: either process dying stops the other with a message naming it; bounded waits;
Ctrl-C stops both and the last checkpoint resumes. No process outlives its run."""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from async_support import register_fault_rewards
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL

from trinity_core.cli.main import main
from trinity_core.hooks import get_plugin_manager
from trinity_core.hookspecs import hookimpl
from trinity_core.train import train
from trinity_core.train.modes.async_mode import ExplorerFailed

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes

DRIVER = Path(__file__).with_name("reliability_driver.py")
WAIT_S = 240  # a loaded machine needs a while to import torch in two processes
CONFIG: dict[str, Any] = {
    "mode": "async",
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


def _with(reward: str, **sync: Any) -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    config["tasks"]["reward_fns"] = [reward]
    config["synchronizer"] = sync
    return config


@pytest.fixture(autouse=True)
def _rewards() -> None:
    register_length_reward()
    register_fault_rewards()


def test_an_explorer_error_stops_the_learner_with_its_message(tmp_path: Path) -> None:
    with pytest.raises(ExplorerFailed) as caught:
        train(_with("failing_reward"), run_dir=tmp_path / "run")
    message = str(caught.value)
    assert "the explorer process (pid " in message
    assert "ValueError: the reward service is down" in message.splitlines()[0]
    assert "no checkpoint was written yet: start again with --overwrite" in message
    assert not multiprocessing.active_children()


def test_a_killed_explorer_stops_the_learner(tmp_path: Path) -> None:
    with pytest.raises(
        ExplorerFailed, match=r"the explorer process \(pid \d+\) ended .*: killed by signal SIGKILL"
    ):
        train(_with("killed_reward"), run_dir=tmp_path / "run")
    assert not multiprocessing.active_children()


def test_an_empty_buffer_is_a_bounded_wait(tmp_path: Path) -> None:
    with pytest.raises(ExplorerFailed, match=r"sent no experiences for 10s \(learner step 2\)"):
        train(_with("stalling_reward", timeout=10), run_dir=tmp_path / "run")
    assert not multiprocessing.active_children()  # the hung explorer was terminated


class _StuckLearner:
    """Holds the learner after its first step until the explorer process has ended (it can end only by
    its own bounded wait for room in the full buffer)."""

    @hookimpl
    def trinity_on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        deadline = time.monotonic() + WAIT_S
        while step == 1 and multiprocessing.active_children() and time.monotonic() < deadline:
            time.sleep(0.1)


def test_a_full_buffer_is_a_bounded_wait(tmp_path: Path) -> None:
    pm = get_plugin_manager()
    pm.register(_StuckLearner(), name="slow-learner")
    try:
        with pytest.raises(ExplorerFailed, match=r"TimeoutError: the buffer stayed full for 10s"):
            train(_with("length_reward", timeout=10), run_dir=tmp_path / "run")
    finally:
        pm.unregister(name="slow-learner")
    assert not multiprocessing.active_children()


# ---------------------------------------------------------------------------------- the learner process


def _start(config: dict[str, Any], tmp_path: Path, pause: str) -> tuple[subprocess.Popen[str], Path, Path]:
    path, run, marker = tmp_path / "async.yaml", tmp_path / "run", tmp_path / "paused"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PAUSE": pause, "MARKER": str(marker)}
    process = subprocess.Popen(
        [sys.executable, str(DRIVER), "--config", str(path), "--run-dir", str(run)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + WAIT_S
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the run did not reach {pause}: {process.communicate()}")
        time.sleep(0.05)
    return process, run, marker


def _explorer_of(pid: int) -> psutil.Process:
    """The explorer process of learner ``pid``: the child of its fork server (a child it spawned where
    there is no fork server)."""
    children = psutil.Process(pid).children()
    servers = [p for p in children if "forkserver" in " ".join(p.cmdline())]
    if servers:
        found = servers[0].children()
    else:
        found = [p for p in children if "spawn_main" in " ".join(p.cmdline())]
    assert len(found) == 1, [p.cmdline() for p in psutil.Process(pid).children(recursive=True)]
    return found[0]


def test_a_killed_learner_stops_the_explorer(tmp_path: Path) -> None:
    process, _, _ = _start(CONFIG, tmp_path, "after_step:2")
    explorer = _explorer_of(process.pid)
    server = explorer.parent()  # the fork server the explorer was started from (Linux)
    assert server is not None
    assert server.pid != process.pid, "the explorer is not the fork server's child"
    process.send_signal(signal.SIGKILL)
    _, err = process.communicate(timeout=WAIT_S)  # EOF once the explorer, which shares stderr, ended too
    _, alive = psutil.wait_procs([explorer, server], timeout=30)
    assert not alive, f"outlived their learner: {alive}"
    assert f"the explorer process stops: the learner process (pid {process.pid}) is gone" in err


def test_ctrl_c_stops_both_and_the_last_checkpoint_resumes(tmp_path: Path) -> None:
    process, run, _ = _start(CONFIG, tmp_path, "after_step:3")
    explorer = _explorer_of(process.pid)
    process.send_signal(signal.SIGINT)  # the learner's process; a terminal sends it to both
    process.communicate(timeout=WAIT_S)
    assert process.returncode != 0
    _, alive = psutil.wait_procs([explorer], timeout=30)
    assert not alive
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"

    assert main(["train", "--resume", str(run)]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # step 3's first row, after the checkpoint, is replaced
    assert not multiprocessing.active_children()
