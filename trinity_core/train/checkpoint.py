"""Atomic checkpoints in safetensors: model, optimizer, scheduler, RNG states, step, buffer state.

Layout of ``<run_dir>/checkpoints``::

    step-000200/            a complete checkpoint
        model.safetensors   model state dict
        optimizer.safetensors + optimizer.json   tensors / structure of the optimizer state
        state.json          step, scheduler, buffer state, task generator, python RNG
        rng-rank<r>.safetensors   torch RNG states of rank r (CPU, CUDA)
    latest                  name of the newest complete checkpoint

A checkpoint is written into ``.tmp-step-000200`` and renamed into place only when complete, then
``latest`` is replaced atomically (``os.replace``). A kill at any moment leaves either the previous
checkpoint or the new one as ``latest``, never a partial one; leftover ``.tmp-*`` directories are
ignored and removed by the next save.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

__all__ = [
    "CheckpointError",
    "latest_checkpoint",
    "load_optimizer_state",
    "load_rng_state",
    "optimizer_state_tensors",
    "save_rng_state",
    "write_json_atomic",
]

LATEST = "latest"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used for resuming."""


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and ``os.replace``."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def step_dir_name(step: int) -> str:
    """``step-000200`` for step 200."""
    return f"step-{step:06d}"


def begin(ckpt_root: Path, step: int) -> Path:
    """Create (fresh) the temporary directory of the checkpoint of ``step`` and return it."""
    tmp = ckpt_root / f".tmp-{step_dir_name(step)}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit(ckpt_root: Path, tmp: Path, step: int, keep: int) -> Path:
    """Rename ``tmp`` into place, point ``latest`` at it, drop old checkpoints beyond ``keep``."""
    final = ckpt_root / step_dir_name(step)
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    pointer = ckpt_root / LATEST
    tmp_pointer = ckpt_root / f".{LATEST}.tmp"
    tmp_pointer.write_text(final.name, encoding="utf-8")
    os.replace(tmp_pointer, pointer)
    complete = sorted(p for p in ckpt_root.glob("step-*") if p.is_dir())
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in ckpt_root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` (``latest`` pointer, else the highest step)."""
    root = run_dir / "checkpoints"
    pointer = root / LATEST
    if pointer.exists():
        target = root / pointer.read_text(encoding="utf-8").strip()
        if (target / "state.json").exists():
            return target
    complete = sorted(p for p in root.glob("step-*") if (p / "state.json").exists())
    return complete[-1] if complete else None


def optimizer_state_tensors(state: dict[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Split an optimizer ``state_dict`` into safetensors-ready tensors and a JSON structure."""
    tensors: dict[str, Tensor] = {}
    per_param: dict[str, dict[str, Any]] = {}
    for idx, entry in state["state"].items():
        meta: dict[str, Any] = {}
        for key, value in entry.items():
            if isinstance(value, Tensor):
                name = f"{idx}.{key}"
                tensors[name] = value.detach().cpu().contiguous()
                meta[key] = {"tensor": name}
            else:
                meta[key] = value
        per_param[str(idx)] = meta
    return tensors, {"state": per_param, "param_groups": state["param_groups"]}


def load_optimizer_state(tensors: dict[str, Tensor], structure: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`optimizer_state_tensors`."""
    state: dict[int, dict[str, Any]] = {}
    for idx, meta in structure["state"].items():
        state[int(idx)] = {
            k: tensors[v["tensor"]] if isinstance(v, dict) and "tensor" in v else v for k, v in meta.items()
        }
    groups = structure["param_groups"]
    for group in groups:
        if "betas" in group and isinstance(group["betas"], list):
            group["betas"] = tuple(group["betas"])
    return {"state": state, "param_groups": groups}


def save_rng_state(path: Path, task_generator: torch.Generator) -> None:
    """Torch CPU / CUDA RNG states and the task generator of this rank, as safetensors."""
    tensors = {"cpu": torch.get_rng_state(), "task": task_generator.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = s
    save_file(tensors, str(path))


def load_rng_state(path: Path, task_generator: torch.Generator) -> None:
    """Restore what :func:`save_rng_state` wrote."""
    if not path.exists():
        raise CheckpointError(
            f"{path} is missing: the checkpoint was written by a run with fewer processes; resume with the "
            "same number of processes"
        )
    tensors = load_file(str(path))
    torch.set_rng_state(tensors["cpu"])
    task_generator.set_state(tensors["task"])
    cuda = [tensors[k] for k in sorted(t for t in tensors if t.startswith("cuda"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def python_rng_state() -> list[Any]:
    """``random.getstate()`` as JSON-friendly lists."""
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def set_python_rng_state(state: list[Any]) -> None:
    """Inverse of :func:`python_rng_state`."""
    random.setstate((state[0], tuple(state[1]), state[2]))
