"""Checkpoints through Accelerate: a 2-process run (torchrun, gloo on CPU) saves and resumes and ends
equal to an uninterrupted one; a checkpoint of another world size or mixed precision is refused with one
line and changes nothing; ``trinity export`` reads a checkpoint written under DDP."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ckpt_dist_worker as worker
import pytest
import torch
import yaml
from reliability_driver import register_length_reward
from safetensors.torch import load_file, save_file
from test_train_distributed import free_port, launch_failure

from trinity_core.cli.main import main

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes


def files_of(run: Path) -> dict[str, str]:
    """sha256 of every file a resume could change (checkpoints, metrics, config)."""
    paths = [p for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"]
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["train", *map(str, args)])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRINITY_TEST_WORKER": "1"}
    for phase in ("straight", "first", "resume"):
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
            "127.0.0.1", "--master_port", str(free_port()), worker.__file__, str(out), phase,
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, (phase, launch_failure(proc.stderr))
    return out


def test_two_processes_save_resume_and_equal_an_uninterrupted_run(two_process_runs: Path) -> None:
    straight, resumed = (
        two_process_runs / name / "checkpoints" / "step-000004" for name in ("straight", "resumed")
    )
    meta = json.loads((resumed / "state.json").read_text())
    assert (meta["world_size"], meta["mixed_precision"], meta["step"]) == (2, "no", 4)
    # What Accelerate wrote: policy weights, optimizer, each rank's RNG states, the registered
    # states (scheduler, buffer cursor, both ranks' task generators).
    a, b = load_file(str(straight / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    first = load_file(str(two_process_runs / "resumed" / "checkpoints" / "step-000002" / "model.safetensors"))
    assert any(not torch.equal(first[k], b[k]) for k in b)  # steps 3 and 4 trained after the resume
    opt_a, opt_b = (torch.load(d / "optimizer.bin", weights_only=True) for d in (straight, resumed))
    for idx, state in opt_a["state"].items():
        for name, value in state.items():
            assert torch.equal(value, opt_b["state"][idx][name]), (idx, name)
    for rank in (0, 1):
        rng_a, rng_b = (
            torch.load(d / f"random_states_{rank}.pkl", weights_only=False) for d in (straight, resumed)
        )
        assert torch.equal(rng_a["torch_manual_seed"], rng_b["torch_manual_seed"]), rank
    ranks_a, ranks_b = (
        torch.load(d / "custom_checkpoint_2.pkl", weights_only=False)["ranks"] for d in (straight, resumed)
    )
    assert len(ranks_a) == 2
    assert not torch.equal(ranks_a[0]["task_generator"], ranks_a[1]["task_generator"])  # per-rank streams
    for x, y in zip(ranks_a, ranks_b, strict=True):
        assert torch.equal(x["task_generator"], y["task_generator"])
    rows = [
        [json.loads(line) for line in (two_process_runs / r / "metrics.jsonl").read_text().splitlines()]
        for r in ("straight", "resumed")
    ]
    assert [r["step"] for r in rows[1]] == [1.0, 2.0, 3.0, 4.0]
    for x, y in zip(*rows, strict=True):
        assert (x["reward/mean"], x["actor/loss"]) == (y["reward/mean"], y["actor/loss"])


def test_a_checkpoint_of_another_world_size_is_refused_and_kept(
    two_process_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    register_length_reward()
    run = tmp_path / "run"
    shutil.copytree(two_process_runs / "resumed", run)
    before = files_of(run)
    code, err = run_cli(capsys, "--resume", run, "--set", "trainer.total_steps=6")
    assert code == 1
    assert err.strip("\n").split("\n") == [
        f"trinity train: error: {run / 'checkpoints' / 'step-000004'} was written by 2 processes, this run "
        "has 1: optimizer and RNG states are per process; relaunch with 2 processes (`torchrun "
        f"--nproc_per_node 2 $(which trinity) train --resume {run}`)"
    ]
    assert files_of(run) == before


def test_export_reads_a_checkpoint_written_under_ddp(two_process_runs: Path, tmp_path: Path) -> None:
    run = two_process_runs / "straight"
    assert main(["export", str(run), str(tmp_path / "out")]) == 0
    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    saved = load_file(str(run / "checkpoints" / "step-000004" / "model.safetensors"))
    saved = {k.removeprefix("module."): v for k, v in saved.items()}  # DDP-wrapped or not
    assert exported.keys() == saved.keys()
    for key, tensor in exported.items():
        torch.testing.assert_close(tensor, saved[key], rtol=0, atol=0, msg=key)


def test_a_checkpoint_of_another_mixed_precision_is_refused_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    register_length_reward()
    config = {**worker.CONFIG, "trainer": {**worker.CONFIG["trainer"], "total_steps": 2}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "--config", str(tmp_path / "tiny.yaml"), "--run-dir", str(run)]) == 0
    saved_config = (run / "config.yaml").read_text()
    assert "mixed_precision: 'no'" in saved_config
    (run / "config.yaml").write_text(saved_config.replace("mixed_precision: 'no'", "mixed_precision: bf16"))
    before = files_of(run)
    code, err = run_cli(capsys, "--resume", run, "--set", "trainer.total_steps=3")
    assert code == 1
    assert err.strip("\n").split("\n") == [
        f"trinity train: error: {run / 'checkpoints' / 'step-000002'} was written with "
        "trainer.mixed_precision no, this run has bf16; set trainer.mixed_precision: no in "
        f"{run / 'config.yaml'} to resume it"
    ]
    assert files_of(run) == before
    (run / "config.yaml").write_text(saved_config)  # the fix the message names: nothing was lost
    code, err = run_cli(capsys, "--resume", run, "--set", "trainer.total_steps=3")
    assert code == 0, err
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1.0, 2.0, 3.0]


def _write_legacy_checkpoint(trainer: Any, step: int) -> None:
    """The checkpoint layout before Accelerate's ``save_state``, as trinity-core wrote it, for ``trainer``."""
    from trinity_core.train.checkpoints import commit as ckpt

    root = trainer.run_dir / "checkpoints"
    tmp = ckpt.begin(root, step)
    policy = trainer.learner.policy
    tied = policy.config.tie_word_embeddings
    state = {
        k: v.detach().contiguous()
        for k, v in policy.state_dict().items()
        if not (tied and k == "lm_head.weight")
    }
    save_file(state, str(tmp / "model.safetensors"))
    tensors, structure = ckpt.optimizer_state_tensors(trainer.learner.optimizer.state_dict())
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "optimizer.json").write_text(json.dumps(structure))
    version, internal, gauss = random.getstate()
    meta = {
        "step": step,
        "world_size": 1,
        "scheduler": trainer.learner.scheduler.state_dict(),
        "buffer": trainer.learner.reader.state_dict(),
        "python_rng": [version, list(internal), gauss],
    }
    (tmp / "state.json").write_text(json.dumps(meta))
    save_file(
        {"cpu": torch.get_rng_state(), "task": trainer.task_gen.get_state()},
        str(tmp / "rng-rank0.safetensors"),
    )
    ckpt.commit(root, tmp, step, keep=2)


def test_a_checkpoint_of_the_layout_before_accelerate_still_resumes(tmp_path: Path) -> None:
    from trinity_core.config import resolve_config
    from trinity_core.train import train
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.run import make_accelerator

    register_length_reward()
    config = {**worker.CONFIG, "trainer": {**worker.CONFIG["trainer"], "checkpoint_every": 1}}
    train(config, run_dir=tmp_path / "straight")
    run = tmp_path / "old"
    train(config, overrides=["trainer.total_steps=2"], run_dir=run)
    # The state of step 2, restored from the new layout, written again in the old one in its place.
    resolved = resolve_config(yaml.safe_load((run / "config.yaml").read_text()))
    trainer = Runner(resolved, run, accelerator=make_accelerator(resolved, run), resume=True)
    trainer.event_loop.close()
    for path in (run / "checkpoints").glob("step-*"):
        shutil.rmtree(path)
    _write_legacy_checkpoint(trainer, 2)
    assert (run / "checkpoints" / "step-000002" / "rng-rank0.safetensors").is_file()
    train(None, resume=run, overrides=["trainer.total_steps=4"])
    a, b = (
        load_file(str(r / "checkpoints" / "step-000004" / "model.safetensors"))
        for r in (tmp_path / "straight", run)
    )
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
