"""The 2-rank check of policy losses: two gloo processes on the CPU, started once per test class.

Each rank takes its rows of the batch as one micro-batch (rank 0 the first :func:`split_point` rows,
rank 1 the rest), builds the normalizers from its mask and all-reduces them
(:func:`~trinity_core.ops.global_normalizers`, which records ``world_size = 2``), back-propagates its loss
and averages the gradient over ranks as DDP does (all-reduce sum / 2). Rank 0 compares the result with
the gradient of the whole batch computed in one call without ``torch.distributed``.

The children rebuild each loss from a :class:`~trinity_core.testing._invariance.LossSpec` (registered
name, or ``module:qualname`` for classes only this process knows), so every loss of a test class is
checked by one start of two processes.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import start_processes

from trinity_core.testing._invariance import (
    SEEDS,
    LossSpec,
    agg_modes,
    build,
    compare,
    invariance_inputs,
    load_class,
    part_gradient,
    split_point,
)

__all__ = ["TIMEOUT_S", "WORLD_SIZE", "run_ranks"]

WORLD_SIZE = 2
TIMEOUT_S = 90.0
"""Wall-clock limit of the whole 2-process run (start, imports and every loss)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_rows(rank: int, rows: int) -> slice:
    cut = split_point(rows)
    return slice(0, cut) if rank == 0 else slice(cut, rows)


def _check_loss(rank: int, spec: LossSpec) -> list[str]:
    """Run every mode and seed of one loss on this rank; rank 0 returns the mismatches found."""
    problems: list[str] = []
    try:
        cls = load_class(spec)
        modes = agg_modes(cls)
        instances = [build(cls, spec.args, mode) for mode in modes]
    except Exception as exc:  # the same on both ranks: neither enters a collective for this loss
        return [f"building it in the child process failed: {type(exc).__name__}: {exc}"]
    for mode, instance in zip(modes, instances, strict=True):
        for seed in SEEDS:
            inputs = invariance_inputs(cls, seed)
            rows = inputs["action_mask"].shape[0]
            failed = torch.zeros(1, dtype=torch.float64)
            try:
                grad = part_gradient(cls, instance, inputs, [_rank_rows(rank, rows)], all_reduce=True)
            except Exception:
                # Keep the collectives in step with the other rank; report this rank's traceback.
                grad = torch.zeros_like(inputs["logprob"])
                failed += 1
                problems.append(f"rank {rank}, loss_agg_mode={mode}, seed {seed}:\n{traceback.format_exc()}")
            flat = torch.cat([grad.detach().to(torch.float64).flatten(), failed])
            dist.all_reduce(flat)
            if rank != 0 or bool(flat[-1] > 0):
                continue
            averaged = flat[:-1].reshape(grad.shape) / WORLD_SIZE
            whole = part_gradient(cls, instance, inputs, [slice(0, rows)], all_reduce=False)
            diff = compare(whole, averaged)
            if diff is not None:
                problems.append(f"loss_agg_mode={mode}, seed {seed}: {diff}")
    return problems


def _worker(rank: int, specs: list[dict[str, Any]], port: int, outdir: str) -> None:
    """Entry point of each child process (``torch.multiprocessing.spawn`` passes ``rank``)."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=TIMEOUT_S),
    )
    try:
        results = {}
        for raw in specs:
            spec = LossSpec(**raw)
            results[spec.key] = _check_loss(rank, spec)
        Path(outdir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def run_ranks(specs: Sequence[LossSpec], timeout: float = TIMEOUT_S) -> dict[str, list[str]]:
    """Check ``specs`` on 2 gloo ranks; ``{spec.key: problems}`` (empty list: invariant).

    Raises:
        RuntimeError: the processes failed to start, crashed or ran past ``timeout`` seconds.
    """
    if not specs:
        return {}
    payload = [{**asdict(s), "args": dict(s.args)} for s in specs]
    # Pickled by reference: take the worker from the module as sys.modules has it now (pytester's
    # in-process runs may have re-imported this module since this function was defined).
    worker = importlib.import_module(__name__)._worker
    with tempfile.TemporaryDirectory(prefix="trinity-kit-ranks-") as outdir:
        # Children inherit the environment: one thread each, the machine may be shared.
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            context = start_processes(  # type: ignore[no-untyped-call]
                worker,
                args=(payload, _free_port(), outdir),
                nprocs=WORLD_SIZE,
                join=False,
                start_method="spawn",
            )
        finally:
            if saved is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=0.2):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the 2 rank processes did not finish within {timeout:.0f} s")
        except Exception as exc:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
                process.join(5)
            raise RuntimeError(f"the 2-rank gloo run failed: {exc}") from exc
        merged: dict[str, list[str]] = {s.key: [] for s in specs}
        for rank in range(WORLD_SIZE):
            found = json.loads(Path(outdir, f"rank{rank}.json").read_text())
            for key, problems in found.items():
                merged[key].extend(problems)
        return merged
