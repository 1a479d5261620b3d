"""Atomic checkpoints in safetensors: model, optimizer, scheduler, RNG states, step, buffer state.

Layout of ``<run_dir>/checkpoints``::

    step-000200/            a complete checkpoint
        model.safetensors   model state dict
        optimizer.safetensors + optimizer.json   tensors / structure of the optimizer state
        state.json          step, scheduler, buffer state, task generator, python RNG
        critic*.safetensors + critic-optimizer.json   the critic and its optimizer (presets with use_critic)
        rng-rank<r>.safetensors   torch RNG states of rank r (CPU, CUDA)
        manifest.json       size and sha256 of every other file, recorded at commit
    latest                  name of the newest complete checkpoint

A checkpoint is written into ``.tmp-step-000200`` and renamed into place only when complete, then
``latest`` is replaced atomically (``os.replace``). A kill at any moment leaves either the previous
checkpoint or the new one as ``latest``, never a partial one; leftover ``.tmp-*`` directories are
ignored and removed by the next save. Damage after the commit (a truncated or deleted file, a disk
error) is caught on resume by :func:`latest_checkpoint`, which checks the manifest and falls back to
the newest intact checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
from collections.abc import Callable
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
    "load_run",
    "optimizer_state_tensors",
    "read_metrics",
    "save_rng_state",
    "save_run",
    "verify_checkpoint",
    "write_json_atomic",
]

LATEST = "latest"
CONFIG_FILE = "config.yaml"
"""The resolved configuration of a run, in the run directory (what ``--resume`` and export read)."""
MANIFEST = "manifest.json"


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


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(directory: Path) -> None:
    """Record the size and sha256 of every file of ``directory`` in its ``manifest.json``."""
    files = {
        p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    write_json_atomic(directory / MANIFEST, {"files": files})


def verify_checkpoint(directory: Path) -> str | None:
    """What is wrong with the checkpoint ``directory`` (one phrase), or ``None`` when it is intact.

    Intact: ``manifest.json`` is readable, every file it lists has the recorded size and sha256, and
    ``state.json`` is a JSON object.
    """
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
    except FileNotFoundError:
        # Checkpoints of trinity-core before manifests existed: the rename-on-commit already made them
        # complete when written, so only what can be checked without a manifest is checked.
        files = {name: None for name in ("model.safetensors", "state.json")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{MANIFEST} is unreadable ({exc})"
    for name, record in files.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if record is None:
            continue
        size = path.stat().st_size
        if size != record["size"]:
            return f"{name} has {size} bytes, {record['size']} were written"
        if _sha256(path) != record["sha256"]:
            return f"{name} does not match its recorded sha256"
    try:
        state = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"state.json is unreadable ({exc})"
    if not isinstance(state, dict):
        return "state.json is not a JSON object"
    return None


def commit(ckpt_root: Path, tmp: Path, step: int, keep: int) -> Path:
    """Record the manifest of ``tmp``, rename it into place, point ``latest`` at it, drop old checkpoints
    beyond ``keep``."""
    write_manifest(tmp)
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


def _warn(message: str) -> None:
    print(f"trinity train: warning: {message}", file=sys.stderr)


def latest_checkpoint(run_dir: Path, warn: Callable[[str], None] = _warn) -> Path | None:
    """The newest intact checkpoint of ``run_dir`` (``latest`` first, then by step, newest first).

    A damaged checkpoint (see :func:`verify_checkpoint`) is skipped with a call to ``warn`` naming it,
    what is wrong and the checkpoint used instead.

    Raises:
        CheckpointError: checkpoints exist but none is intact.
    """
    root = run_dir / "checkpoints"
    candidates = sorted((p for p in root.glob("step-*") if p.is_dir()), reverse=True)
    pointer = root / LATEST
    if pointer.exists():
        named = root / pointer.read_text(encoding="utf-8").strip()
        if named in candidates:  # normally the newest; after a kill between rename and pointer, not
            candidates.remove(named)
            candidates.insert(0, named)
    damaged: list[str] = []
    for path in candidates:
        problem = verify_checkpoint(path)
        if problem is None:
            if not (path / MANIFEST).exists():
                warn(f"checkpoint {path} has no {MANIFEST} (written by an older trinity-core): not verified")
            if damaged:
                warn(f"{'; '.join(damaged)}; resuming from {path.name} instead")
            return path
        damaged.append(f"checkpoint {path} is damaged: {problem}")
    if damaged:
        raise CheckpointError(
            f"{'; '.join(damaged)}; no intact checkpoint is left in {root}: start a new run (--overwrite)"
        )
    return None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl``; a last line cut short by a crash is left out.

    Raises:
        CheckpointError: a line other than the last is not JSON (the file was damaged, not cut short).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break  # a kill while the row was being written
            raise CheckpointError(
                f"{path}: line {number} is not JSON; delete the line (or the file) and resume again"
            ) from None
    return rows


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


# ------------------------------------------------------------------ a run's checkpoint


def save_run(
    run_dir: Path,
    step: int,
    accelerator: Any,
    learner: Any,
    task_generator: torch.Generator,
    keep: int,
    task: Any = None,
) -> None:
    """Write the checkpoint of ``step`` atomically: the learner's weights, optimizer, scheduler and buffer
    cursor, the RNG states and ``task``'s position in its data (every rank writes its own)."""
    # Looked up at call time, so that a test can stand in a failing disk for safetensors' writer.
    from safetensors.torch import save_file

    root = run_dir / "checkpoints"
    tmp = root / f".tmp-{step_dir_name(step)}"
    rank, is_main = accelerator.process_index, accelerator.is_main_process
    if is_main:
        begin(root, step)
    accelerator.wait_for_everyone()
    save_rng_state(tmp / f"rng-rank{rank}.safetensors", task_generator)
    if task is not None:  # a dataset's shuffled order and epoch; each rank has its own
        write_json_atomic(tmp / f"task-rank{rank}.json", task.state_dict())
    if is_main:
        policy = learner.policy
        state = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
        if getattr(policy.config, "tie_word_embeddings", False):
            for key in [k for k in state if k.endswith("lm_head.weight")]:  # also a PEFT model's
                del state[key]
        save_file(state, str(tmp / "model.safetensors"))
        tensors, structure = optimizer_state_tensors(learner.optimizer.state_dict())
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "optimizer.json").write_text(json.dumps(structure), encoding="utf-8")
        meta = {
            "step": step,
            "world_size": accelerator.num_processes,
            "scheduler": learner.scheduler.state_dict(),
            "buffer": learner.reader.state_dict(),
            "python_rng": python_rng_state(),
        }
        (tmp / "state.json").write_text(json.dumps(meta), encoding="utf-8")
        if getattr(learner, "critic", None) is not None:  # weights + optimizer of a PPO critic
            learner.critic.save(tmp)
    accelerator.wait_for_everyone()
    if is_main:
        commit(root, tmp, step, keep)
    accelerator.wait_for_everyone()


def load_run(
    run_dir: Path, accelerator: Any, learner: Any, task_generator: torch.Generator, task: Any = None
) -> int:
    """Restore the last intact checkpoint of ``run_dir`` into ``learner``, the RNGs and ``task``'s
    position in its data; return its step.

    The metrics of steps after the checkpoint are dropped from ``metrics.jsonl`` (they are replayed).
    """
    path = latest_checkpoint(run_dir)
    if path is None:
        raise CheckpointError(
            f"--resume {run_dir}: no complete checkpoint in {run_dir / 'checkpoints'}; start a "
            "new run (--overwrite) instead"
        )
    meta = json.loads((path / "state.json").read_text(encoding="utf-8"))
    if meta["world_size"] != accelerator.num_processes:
        raise CheckpointError(
            f"{path} was written by {meta['world_size']} processes, this run has "
            f"{accelerator.num_processes}; resume with the same number of processes"
        )
    state = load_file(str(path / "model.safetensors"))
    missing, unexpected = learner.policy.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise CheckpointError(f"{path}: model weights do not fit the model ({missing}, {unexpected})")
    structure = json.loads((path / "optimizer.json").read_text(encoding="utf-8"))
    learner.optimizer.load_state_dict(
        load_optimizer_state(load_file(str(path / "optimizer.safetensors")), structure)
    )
    learner.scheduler.load_state_dict(meta["scheduler"])
    if getattr(learner, "critic", None) is not None:
        learner.critic.load(path)
    set_python_rng_state(meta["python_rng"])
    load_rng_state(path / f"rng-rank{accelerator.process_index}.safetensors", task_generator)
    task_state = path / f"task-rank{accelerator.process_index}.json"
    if task is not None and task_state.exists():  # checkpoints from before tasks saved a position have none
        from trinity_core.train.dataset_io import TaskDataError

        try:
            task.load_state_dict(json.loads(task_state.read_text(encoding="utf-8")))
        except TaskDataError as exc:
            raise CheckpointError(f"{path}: {exc}") from exc
    step = int(meta["step"])
    metrics = run_dir / "metrics.jsonl"
    if accelerator.is_main_process and metrics.exists():
        kept = [r for r in read_metrics(metrics) if r["step"] <= step]
        tmp = run_dir / ".metrics.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        os.replace(tmp, metrics)
    accelerator.wait_for_everyone()
    return step
