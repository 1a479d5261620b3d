"""Two gloo ranks on CPU (torchrun): identical parameters, and the single-process gradient to 1e-6 with
row micro-batches, token-budget micro-batches and batches balanced across the ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import train_dist_worker as worker
from safetensors.torch import load_file

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(
    command: Callable[[int], list[str]], env: dict[str, str], timeout: int = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a multi-process launch ``command(port)`` on a free port; a launch whose port was taken between
    choosing it and binding it (another test's launch, running beside this one) is retried on a new port."""
    for _attempt in range(3):
        proc = subprocess.run(
            command(free_port()),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=cwd,
        )
        if proc.returncode == 0 or "address already in use" not in proc.stderr.lower():
            return proc
    return proc


def launch_failure(stderr: str) -> str:
    """A failed multi-process launch's stderr, cut to fit: its start holds the first rank's traceback
    (the cause), its end the launcher's summary (the other ranks only report the lost peer)."""
    return stderr if len(stderr) <= 6000 else f"{stderr[:4000]}\n[...]\n{stderr[-2000:]}"


def test_two_ranks_match_one_process(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRINITY_TEST_WORKER": "1"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(free_port()), worker.__file__, str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, launch_failure(proc.stderr)

    # Identical parameters on both ranks after three real steps (DDP kept them in sync).
    p0, p1 = (
        load_file(str(tmp_path / "params0.safetensors")),
        load_file(str(tmp_path / "params1.safetensors")),
    )
    assert p0.keys() == p1.keys()
    for name in p0:
        assert torch.equal(p0[name], p1[name]), name

    # The 2-rank gradient (unequal response lengths per rank, 2 micro-batches each) equals the gradient
    # of one process on the whole batch in one micro-batch.
    g0, g1 = load_file(str(tmp_path / "grad0.safetensors")), load_file(str(tmp_path / "grad1.safetensors"))
    single = worker.step_gradient(
        worker.make_trainer(tmp_path / "single", {"micro_batch_size": None}), worker.fixed_experiences()
    )
    for name, g in single.items():
        assert torch.equal(g0[name], g1[name]), name
        rel = (g0[name] - g).norm() / g.norm().clamp_min(1e-30)
        assert rel < 1e-6, (name, float(rel))

    # The same with micro-batches of at most 9 tokens (rank 0's rows hold 5, 7, 6, 5 tokens: four pieces;
    # rank 1's 7 each: four pieces), and after balancing the rows over the ranks by tokens.
    for kind in ("gradtok", "gradbal"):
        g0, g1 = (load_file(str(tmp_path / f"{kind}{rank}.safetensors")) for rank in (0, 1))
        for name, g in single.items():
            assert torch.equal(g0[name], g1[name]), (kind, name)
            rel = (g0[name] - g).norm() / g.norm().clamp_min(1e-30)
            assert rel < 1e-6, (kind, name, float(rel))

    # Groups of two rows: (5+7) (6+5) on rank 0 = 23 tokens, (7+7) (7+7) on rank 1 = 28. Largest first
    # to the lighter rank: 14 -> r0, 14 -> r1, 12 -> r0 (tie: lower rank), 11 -> r1: 26 and 25 tokens.
    b0, b1 = (json.loads((tmp_path / f"balance{rank}.json").read_text()) for rank in (0, 1))
    assert (b0["balance/tokens_before"], b1["balance/tokens_before"]) == (23.0, 28.0)
    assert (b0["balance/tokens_after"], b1["balance/tokens_after"]) == (26.0, 25.0)
    assert b0["balance/max_over_mean"] == b1["balance/max_over_mean"] == pytest.approx(26 / 25.5)
