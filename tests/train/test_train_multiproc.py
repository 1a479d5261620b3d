"""Explorer processes beside several learner ranks, on the CPU with gloo (issue 34).

Each launch runs ``multiproc_worker.py`` (``trinity train`` with the test rewards registered) under
torchrun or ``accelerate launch``, one torch thread per process, and checks what the run wrote.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
import yaml
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL
from safetensors.torch import load_file
from test_train_distributed import free_port, launch_failure

from trinity_core.config import ConfigError
from trinity_core.train import train

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes

WORKER = Path(__file__).with_name("multiproc_worker.py")
WAIT_S = 600
TINY: dict[str, Any] = {
    "mode": "async",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 4},
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "trainer": {"total_steps": 4, "checkpoint_every": 0, "progress": False, "threads": 1, "seed": 1},
    "model": TINY_MODEL,
    "synchronizer": {"sync_offset": 1},
}
COPY_STEPS = 100
COPY: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 8, "kl_loss_fn": "none"},
    "tasks": {"name": "copy", "args": {"length": 2, "letters": "abc"}, "eval_size": 0},
    "rollout": {"prompts_per_step": 16},
    "trainer": {
        "total_steps": COPY_STEPS,
        "lr": 5e-4,
        "checkpoint_every": 0,
        "progress": False,
        "threads": 1,
    },
}
COPY_TARGET = 0.3
"""Mean reward of the last 10 of the :data:`COPY_STEPS` steps (a random model's is about 0)."""


def _config(base: dict[str, Any], **sync: Any) -> dict[str, Any]:
    config = copy.deepcopy(base)
    config.setdefault("synchronizer", {}).update(sync)
    return config


def _write(config: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _command(out: Path, args: list[Any], nproc: int, machine: tuple[int, int] | None, port: int) -> list[str]:
    nodes = [] if machine is None else ["--nnodes", str(machine[1]), "--node_rank", str(machine[0])]
    return [
        sys.executable, "-m", "torch.distributed.run", *nodes, "--nproc_per_node", str(nproc),
        "--master_addr", "127.0.0.1", "--master_port", str(port), str(WORKER), str(out), *map(str, args),
    ]  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", **extra}


def launch(out: Path, args: list[Any], nproc: int = 2, **env: str) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc_per_node nproc multiproc_worker.py out args`` to its end."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = _command(out, args, nproc, None, free_port())
    return subprocess.run(cmd, env=_env(**env), capture_output=True, text=True, timeout=WAIT_S, check=False)


def metrics(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def facts(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


def last_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(sorted((run / "checkpoints").glob("step-*"))[-1] / "model.safetensors"))


def windows(rewards: list[float]) -> list[float]:
    """Mean reward of each 10 steps."""
    return [sum(rewards[i : i + 10]) / 10 for i in range(0, len(rewards), 10)]


@pytest.fixture(autouse=True)
def _rewards() -> None:
    register_length_reward()


# ------------------------------------------------------------------------------------------- learning


def test_two_learner_ranks_and_an_explorer_process_are_reproducible_and_learn_like_one(
    tmp_path: Path,
) -> None:
    config = _write(_config(COPY, sync_offset=1, explorer_process=True), tmp_path / "copy.yaml")
    one = train(str(config), run_dir=tmp_path / "one")
    rewards_one = [row["reward/mean"] for row in one.history]
    runs = []
    for name in ("a", "b"):
        proc = launch(tmp_path / f"out-{name}", ["--config", config, "--run-dir", tmp_path / name])
        assert proc.returncode == 0, launch_failure(proc.stderr)
        runs.append(metrics(tmp_path / name))
    # Two learner ranks: the same weights after every step of two runs, whatever the processes' timing.
    a, b = last_weights(tmp_path / "a"), last_weights(tmp_path / "b")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["actor/loss"] for r in runs[0]] == [r["actor/loss"] for r in runs[1]]
    # One explorer samples the same tasks with the same weight versions for 1 or 2 learner ranks, and the
    # 2-rank update is the 1-rank one up to rounding: the same curve, the same target in the same steps.
    rewards_two = [row["reward/mean"] for row in runs[0]]
    assert [r["staleness/mean"] for r in runs[0]] == [r["staleness/mean"] for r in one.history]
    for w_one, w_two in zip(windows(rewards_one), windows(rewards_two), strict=True):
        assert abs(w_one - w_two) <= 0.15, (windows(rewards_one), windows(rewards_two))
    for rewards in (rewards_one, rewards_two):
        assert sum(rewards[-10:]) / 10 >= COPY_TARGET, windows(rewards)


def test_two_learner_ranks_and_two_explorers_in_mode_async_learn_to_copy(tmp_path: Path) -> None:
    config = _config(COPY, sync_offset=1, explorers=2)
    config["mode"] = "async"
    path, run, out = _write(config, tmp_path / "copy.yaml"), tmp_path / "run", tmp_path / "out"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--main_process_port", str(free_port()), str(WORKER), str(out), "--config", str(path),
        "--run-dir", str(run),
    ]  # fmt: skip
    out.mkdir()
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 0, launch_failure(proc.stderr)
    assert [f["local_explorers"] for f in facts(out)] == [[0, 1], []]  # both on rank 0's machine
    rows = metrics(run)
    rewards = [row["reward/mean"] for row in rows]
    assert sum(rewards[-10:]) / 10 >= COPY_TARGET, windows(rewards)
    # The link holds one step per explorer (sync_offset 1) and weights go out every step.
    assert max(row["staleness/max"] for row in rows) <= 2.0
    # Every step trained on all 16 x 8 rows once: nothing lost or duplicated between 2 explorers and 2 ranks.
    for row in rows:
        assert row["throughput/experiences_per_s"] * row["time/step_s"] == pytest.approx(128.0)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["synchronizer"]["explorers"] == 2


def test_two_machines_run_mode_async_with_the_weights_broadcast(tmp_path: Path) -> None:
    # Two torchrun launches on one host, as two machines of one learner rank each, on a loopback
    # rendezvous; one explorer per machine (the default), the second fed by the broadcast from rank 0.
    config = _write(_config(TINY), tmp_path / "tiny.yaml")
    run, out, port = tmp_path / "run", tmp_path / "out", free_port()
    out.mkdir()
    args = ["--config", config, "--run-dir", run]
    procs = [
        subprocess.Popen(
            _command(out, args, 1, (machine, 2), port),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for machine in (0, 1)
    ]
    results = [p.communicate(timeout=WAIT_S) for p in procs]
    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, launch_failure(err)
    ranks = facts(out)
    assert [(f["machine"], f["machines"], f["explorers"], f["local_explorers"]) for f in ranks] == [
        (0, 2, 2, [0]),
        (1, 2, 2, [1]),
    ]
    # The initial weights and one publish after each of the 4 steps, sent by rank 0, received on machine 1.
    assert [f["weight_broadcasts"] for f in ranks] == [5, 5]
    rows = metrics(run)
    assert [row["step"] for row in rows] == [1.0, 2.0, 3.0, 4.0]
    assert rows[0]["staleness/max"] == 0.0
    assert max(row["staleness/max"] for row in rows) <= 2.0  # link of 1 step, weights every step
    assert not (run / "sync").exists()  # method memory: no weights file


# -------------------------------------------------------------------------------------------- faults


def _descendants(pid: int) -> list[psutil.Process]:
    return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]


def _rank(processes: list[psutil.Process], rank: int) -> psutil.Process:
    """The learner rank ``rank`` among ``processes`` (the worker whose RANK it is; explorers inherit the
    variable from their fork server, so the worker's command line tells them apart)."""
    found = []
    for p in processes:
        try:
            if p.environ().get("RANK") == str(rank) and str(WORKER) in p.cmdline():
                found.append(p)
        except psutil.Error:
            continue
    assert len(found) == 1, [p.cmdline() for p in processes]
    return found[0]


def test_a_killed_explorer_stops_every_learner_rank_with_one_line_naming_it(tmp_path: Path) -> None:
    config = _config(TINY, explorers=2)
    config["tasks"]["reward_fns"] = ["killed_reward"]  # each explorer kills itself in its second step
    path, out = _write(config, tmp_path / "tiny.yaml"), tmp_path / "out"
    proc = launch(out, ["--config", path, "--run-dir", tmp_path / "run"])
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("trinity train: error:")]
    named = r"trinity train: error: explorer process [01] of 2 \(pid \d+\) ended before learner step \d"
    naming = [line for line in lines if re.fullmatch(named + ": killed by signal SIGKILL", line)]
    assert len(naming) == 1, proc.stderr[-4000:]
    # Rank 1, in the exchange of the step when rank 0 stopped, says so in one line (unless the launcher
    # ended it first).
    for line in set(lines) - set(naming):
        assert line.startswith(
            "trinity train: error: learner rank 1: the exchange of the explorers' experiences"
        )
        assert line.endswith(
            "another process of the launch ended or stopped answering: its own error, above, says why"
        )


def test_a_killed_explorer_is_restarted_and_its_steps_issued_again(tmp_path: Path, capfd: Any) -> None:
    from async_support import register_fault_rewards

    register_fault_rewards()
    config = _config(TINY, explorers=2, explorer_restarts=1)
    config["tasks"]["reward_fns"] = ["killed_once_reward"]
    config["tasks"]["reward_fn_args"] = {"killed_once_reward": {"marker": str(tmp_path / "killed")}}
    result = train(config, run_dir=tmp_path / "run")
    assert (tmp_path / "killed").exists()  # an explorer was killed
    warning = re.search(
        r"trinity train: warning: explorer process [01] of 2 \(pid \d+\) ended .*", capfd.readouterr().err
    )
    assert warning is not None
    assert re.search(
        r"killed by signal SIGKILL; starting it again at step \d with the weights of version \d", warning[0]
    )
    assert warning[0].endswith("(restart 1 of 1)")
    # Every step trained on the 4 x 4 rows of both explorers once: the lost step was made again.
    assert [row["step"] for row in result.history] == [1.0, 2.0, 3.0, 4.0]
    for row in result.history:
        assert row["throughput/experiences_per_s"] * row["time/step_s"] == pytest.approx(16.0)


def _paused_launch(tmp_path: Path, **popen: Any) -> tuple[subprocess.Popen[str], list[psutil.Process], Path]:
    """2 ranks and 2 explorers in mode async, checkpoints every 2 steps, rank 0 paused after step 3 (rank 1
    then waits in step 4's exchange); the launcher, every process of the launch, the run directory."""
    config = _config(TINY, explorers=2, timeout=60)
    config["trainer"].update(total_steps=6, checkpoint_every=2, keep_checkpoints=5)
    path, run, out, marker = (
        _write(config, tmp_path / "tiny.yaml"),
        tmp_path / "run",
        tmp_path / "out",
        tmp_path / "m",
    )
    out.mkdir()
    cmd = _command(out, ["--config", path, "--run-dir", run], 2, None, free_port())
    env = _env(PAUSE="after_step:3", MARKER=str(marker))
    launcher = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )
    deadline = time.monotonic() + WAIT_S
    while not marker.exists():
        assert launcher.poll() is None, launcher.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    every = _descendants(launcher.pid)  # torchrun, 2 ranks, rank 0's fork server and 2 explorers
    assert len(every) >= 6, [p.cmdline() for p in every]
    return launcher, every, run


def _ended(launcher: subprocess.Popen[str], every: list[psutil.Process], began: float) -> None:
    """Every process of the launch ends, well within synchronizer.timeout (60 s), the launch failed."""
    launcher.communicate(timeout=WAIT_S)
    _, alive = psutil.wait_procs(every, timeout=60)
    assert not alive, f"outlived the run: {[p.cmdline() for p in alive]}"
    assert launcher.returncode != 0
    assert time.monotonic() - began < 60


def test_ctrl_c_ends_every_process_of_the_launch(tmp_path: Path) -> None:
    launcher, every, run = _paused_launch(tmp_path, start_new_session=True)
    os.killpg(launcher.pid, signal.SIGINT)  # a terminal's Ctrl-C: every process of the foreground group
    _ended(launcher, every, time.monotonic())
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"


def test_a_killed_learner_rank_ends_every_process_and_the_run_resumes_as_launched(tmp_path: Path) -> None:
    launcher, every, run = _paused_launch(tmp_path)
    _rank(every, 1).send_signal(signal.SIGKILL)
    _ended(launcher, every, time.monotonic())
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"

    # --resume with the same 2 ranks (and the 2 explorers config.yaml holds) ends the run.
    proc = launch(tmp_path / "out-resume", ["--resume", run])
    assert proc.returncode == 0, launch_failure(proc.stderr)
    assert [row["step"] for row in metrics(run)] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    # Another number of ranks or of explorers: one line each.
    with pytest.raises(ConfigError, match=r"synchronizer\.explorers: a resumed run keeps its saved config"):
        train(resume=run, overrides=["synchronizer.explorers=1", "trainer.total_steps=8"])
    proc = launch(tmp_path / "out-one", ["--resume", run, "--set", "trainer.total_steps=8"], nproc=1)
    assert proc.returncode == 1
    assert "was written by 2 processes, this run has 1" in proc.stderr


def test_a_rendezvous_that_never_completes_ends_before_the_run_starts(tmp_path: Path) -> None:
    # Machine 1 never comes: torchrun's static rendezvous gives up after --rdzv-conf timeout seconds
    # (docs/modes.md, Bad input), before any rank starts, so nothing of the run is made.
    run = tmp_path / "run"
    cmd = _command(
        tmp_path,
        ["--config", _write(_config(TINY), tmp_path / "t.yaml"), "--run-dir", run],
        1,
        (0, 2),
        free_port(),
    )
    cmd[3:3] = ["--rdzv-conf", "timeout=5"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 1
    assert "waiting for clients. 1/2 clients joined" in proc.stderr.splitlines()[-1]
    assert not run.exists()
