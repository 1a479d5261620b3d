"""Atomic checkpoints: a temporary folder, a manifest of sizes and sha256, a rename, a ``latest`` pointer.

Layout of ``<run_dir>/checkpoints``::

    step-000200/            a complete checkpoint
        ...                 what ``accelerator.save_state`` wrote (see :mod:`~trinity_core.train.
                            checkpoint_state`), plus state.json: step, world size, mixed precision
        manifest.json       size and sha256 of every other file (subfolders included), recorded at commit
    latest                  name of the newest complete checkpoint

A checkpoint is written into ``.tmp-step-000200`` and renamed into place only when complete, then
``latest`` is replaced atomically (``os.replace``). A kill at any moment leaves either the previous
checkpoint or the new one as ``latest``, never a partial one; leftover ``.tmp-*`` directories are
ignored and removed by the next save. Damage after the commit (a truncated or deleted file, a disk
error) is caught on resume by :func:`latest_checkpoint`, which checks the manifest and falls back to
the newest intact checkpoint. This module knows nothing of what a checkpoint holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch import Tensor

__all__ = [
    "CheckpointError",
    "intact_checkpoints",
    "latest_checkpoint",
    "load_optimizer_state",
    "optimizer_state_tensors",
    "read_metrics",
    "verify_checkpoint",
    "warn",
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
    """Record the size and sha256 of every file under ``directory`` in its ``manifest.json`` (paths
    relative to ``directory``: Accelerate writes sharded FSDP states into subfolders)."""
    files = {
        p.relative_to(directory).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    write_json_atomic(directory / MANIFEST, {"files": files})


def verify_checkpoint(directory: Path) -> str | None:
    """What is wrong with the checkpoint ``directory`` (one phrase), or ``None`` when it is intact.

    Intact: ``manifest.json`` is readable and maps each file to its size and sha256, every file it lists
    has the recorded size and sha256, and ``state.json`` is a JSON object.
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
    malformed = _malformed(files)
    if malformed:
        return f"{MANIFEST} is malformed ({malformed})"
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


def _malformed(files: Any) -> str | None:
    """What is wrong with a manifest's ``files`` (a file name -> ``{"size": int, "sha256": str}`` map)."""
    if not isinstance(files, dict):
        return f"'files' is a {type(files).__name__}, not an object"
    for name, record in files.items():
        if record is None:
            continue
        if not isinstance(record, dict):
            return f"the record of {name} is a {type(record).__name__}"
        size, digest = record.get("size"), record.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or not isinstance(digest, str):
            return f"the record of {name} has no integer size and sha256 text"
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
    if pointer.is_dir() and not pointer.is_symlink():  # a damaged pointer (resume warned and skipped it)
        shutil.rmtree(pointer)
    os.replace(tmp_pointer, pointer)
    complete = sorted(p for p in ckpt_root.glob("step-*") if p.is_dir())
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in ckpt_root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def warn(message: str) -> None:
    """Print ``message`` as a warning of ``trinity train`` on stderr."""
    print(f"trinity train: warning: {message}", file=sys.stderr)


def latest_checkpoint(run_dir: Path, warn: Callable[[str], None] = warn) -> Path | None:
    """The newest intact checkpoint of ``run_dir`` (``latest`` first, then by step, newest first).

    A damaged checkpoint (see :func:`verify_checkpoint`) is skipped with a call to ``warn`` naming it,
    what is wrong and the checkpoint used instead.

    Raises:
        CheckpointError: checkpoints exist but none is intact.
    """
    return next(intact_checkpoints(run_dir, warn), None)


def intact_checkpoints(run_dir: Path, warn: Callable[[str], None] = warn) -> Iterator[Path]:
    """The intact checkpoints of ``run_dir``, the one to resume from first (see :func:`latest_checkpoint`).

    An unreadable ``latest`` pointer (not text, a directory) is ignored with a warning: the newest
    checkpoint by step is then first.

    Raises:
        CheckpointError: checkpoints exist but none is intact (when the iteration gets there).
    """
    root = run_dir / "checkpoints"
    candidates = sorted((p for p in root.glob("step-*") if p.is_dir()), reverse=True)
    named = _pointed_at(root, warn)
    if named in candidates:  # normally the newest; after a kill between rename and pointer, not
        candidates.remove(named)
        candidates.insert(0, named)
    damaged: list[str] = []
    for path in candidates:
        problem = verify_checkpoint(path)
        if problem is not None:
            damaged.append(f"checkpoint {path} is damaged: {problem}")
            continue
        if not (path / MANIFEST).exists():
            warn(f"checkpoint {path} has no {MANIFEST} (written by an older trinity-core): not verified")
        if damaged:
            warn(f"{'; '.join(damaged)}; resuming from {path.name} instead")
            damaged = []
        yield path
    if damaged:
        raise CheckpointError(
            f"{'; '.join(damaged)}; no intact checkpoint is left in {root}: start a new run (--overwrite)"
        )


def _pointed_at(root: Path, warn: Callable[[str], None]) -> Path | None:
    """The checkpoint ``latest`` names, or None when there is no pointer or it cannot be read."""
    pointer = root / LATEST
    if not pointer.exists():
        return None
    try:
        return root / pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        warn(f"{pointer} is unreadable ({type(exc).__name__}); resuming from the newest intact checkpoint")
        return None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl``; a last line cut short by a crash is left out.

    Raises:
        CheckpointError: a line other than the last is not JSON (the file was damaged, not cut short), or
            a line is not a metrics row (a JSON object with a numeric ``step``).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if number == len(lines):
                break  # a kill while the row was being written
            raise CheckpointError(
                f"{path}: line {number} is not JSON; delete the line (or the file) and resume again"
            ) from None
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int | float) or isinstance(step, bool):
            raise CheckpointError(
                f"{path}: line {number} is not a metrics row (a JSON object with a numeric 'step'); "
                "delete the line (or the file) and resume again"
            )
        rows.append(row)
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
