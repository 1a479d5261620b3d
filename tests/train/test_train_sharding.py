"""Sharded training with the shipped Accelerate configs (examples/accelerate/*.yaml).

With the installed Accelerate (1.15) and torch on CPU, ``accelerate launch --config_file
examples/accelerate/fsdp.yaml`` starts two gloo processes that run ``trinity train`` unchanged, but as DDP:
Accelerate enables FSDP only on GPU-like devices. The run says so in one warning line. The gradient of
DDP on two CPU ranks is tested against one process in test_train_distributed.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from test_train_distributed import launch, launch_failure

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "accelerate"


@pytest.mark.parametrize(
    ("name", "kind", "section"),
    [("fsdp", "FSDP", "fsdp_config"), ("deepspeed_zero3", "DEEPSPEED", "deepspeed_config")],
)
def test_the_shipped_accelerate_configs_are_valid_for_the_installed_accelerate(
    name: str, kind: str, section: str
) -> None:
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    path = EXAMPLES / f"{name}.yaml"
    config = load_config_from_file(str(path))  # a key the ClusterConfig does not know raises
    assert config.distributed_type.value == kind
    assert config.mixed_precision == "bf16"
    options = {action.dest for action in launch_command_parser()._actions}
    keys = yaml.safe_load(path.read_text())[section]
    assert keys
    assert set(keys) <= options, set(keys) - options  # each one an `accelerate launch` option


def test_a_launch_that_asks_for_sharding_and_runs_ddp_is_a_warning() -> None:
    from trinity_core.train.modes.sharding import sharding_fallback

    message = sharding_fallback("MULTI_CPU", {"ACCELERATE_USE_FSDP": "true"})
    assert message is not None
    assert all(word in message for word in ("FSDP", "MULTI_CPU", "only on GPUs", "not sharded"))
    assert sharding_fallback("FSDP", {"ACCELERATE_USE_FSDP": "true"}) is None
    assert "DEEPSPEED" in (sharding_fallback("MULTI_GPU", {"ACCELERATE_USE_DEEPSPEED": "true"}) or "")
    assert sharding_fallback("MULTI_CPU", {}) is None


def test_the_fsdp_config_launches_trinity_train_on_two_cpu_processes_as_ddp(tmp_path: Path) -> None:
    run = tmp_path / "run"
    trinity = Path(sys.executable).parent / "trinity"

    def cmd(port: int) -> list[str]:
        shutil.rmtree(run, ignore_errors=True)  # a retried launch starts a fresh run
        return [
            sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(EXAMPLES / "fsdp.yaml"),
            "--main_process_port", str(port), str(trinity), "train", "--run-dir", str(run),
            "--set", "trainer.total_steps=1", "--set", "trainer.progress=false", "--set", "tasks.eval_size=0",
            "--set", "trainer.threads=1", "--set", "rollout.prompts_per_step=2",
        ]  # fmt: skip

    proc = launch(cmd, {**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert proc.returncode == 0, launch_failure(proc.stderr)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("trinity train: warning:")]
    assert len(warnings) == 1, proc.stderr[-3000:]  # from the main process only
    assert "asks for FSDP" in warnings[0]
    assert "MULTI_CPU" in warnings[0]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]
