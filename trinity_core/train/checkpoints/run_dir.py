"""The run directory: created and locked for one run at a time, checked before anything is written into
it (another run, a user's files), prepared for a new run, and left as found when no run was written.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from trinity_core.config import ResolvedConfig
from trinity_core.train.checkpoints.commit import CONFIG_FILE

__all__ = [
    "LOCK_FILE",
    "RUN_OUTPUTS",
    "RunDirError",
    "check_new_run_dir",
    "default_run_dir",
    "dump_yaml",
    "holds_files",
    "lock_run_dir",
    "path_exists",
    "prepare_run_dir",
    "release_run_dir",
]

LOCK_FILE = ".lock"
"""Held (``filelock``) by the main process of the run writing the directory, for the run's lifetime."""

RUN_OUTPUTS = frozenset(
    {
        CONFIG_FILE,
        "metrics.jsonl",
        ".metrics.jsonl.tmp",
        "samples.jsonl",
        "summary.json",
        "plot.png",
        "eval.json",
        "checkpoints",
        "model",
        "experiences",
        "sync",
        "logs",
    }
)
"""What a run writes into its directory: all that ``--overwrite`` removes."""


class RunDirError(ValueError):
    """The run directory cannot be used as asked (holds another run, is in use, cannot be written, or
    has nothing to resume)."""


def dump_yaml(path: Path, data: Any) -> None:
    """Write ``data`` as YAML to ``path`` atomically (a reader sees the old file or the new one)."""
    yaml: Any = importlib.import_module("yaml")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def holds_files(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds anything besides the lock file."""
    return run_dir.is_dir() and any(p.name != LOCK_FILE for p in run_dir.iterdir())


def lock_run_dir(run_dir: Path) -> FileLock:
    """Create ``run_dir`` if needed and take its lock (held until released), or raise :class:`RunDirError`.

    The lock lives in the directory, so a second ``trinity train`` into the same directory fails here,
    before it reads or writes anything there; a killed run's lock dies with its process.
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(run_dir / LOCK_FILE)
        lock.acquire(timeout=0)
    except Timeout:
        raise RunDirError(
            f"run directory {run_dir} is in use by another trinity train (it holds {run_dir / LOCK_FILE}); "
            "wait for that run to end, or choose another --run-dir"
        ) from None
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (run_dir, *run_dir.parents) if p.exists() and not p.is_dir()), run_dir)
        raise RunDirError(
            f"run directory {run_dir} cannot be created: {blocker} is a file, not a directory; choose "
            "another --run-dir"
        ) from None
    except OSError as exc:
        raise RunDirError(
            f"run directory {run_dir} cannot be written ({exc.strerror or exc}); make it writable or "
            "choose another --run-dir"
        ) from None
    return lock


def path_exists(run_dir: Path) -> bool:
    """Whether ``run_dir`` exists; a name the file system cannot hold is a :class:`RunDirError`."""
    try:
        return run_dir.exists()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise RunDirError(
                f"run directory name {str(run_dir)[:80]}... is longer than the file system allows; choose a "
                "shorter --run-dir (or trainer.run_dir)"
            ) from None
        raise RunDirError(
            f"run directory {run_dir} cannot be read ({exc.strerror or exc}); choose another --run-dir"
        ) from None


def release_run_dir(lock: FileLock, run_dir: Path, remove_if_unused: bool) -> None:
    """Release ``lock``. When no run was written into ``run_dir`` (no ``config.yaml``), leave nothing
    behind: the lock file goes, and the directory too when this run created it and it is empty."""
    if not (run_dir / CONFIG_FILE).exists():
        # Unlinked while still held, so that no other run can take a lock on a file about to vanish.
        with contextlib.suppress(OSError):
            (run_dir / LOCK_FILE).unlink()
        if remove_if_unused and not holds_files(run_dir):
            with contextlib.suppress(OSError):
                run_dir.rmdir()
    lock.release()


def prepare_run_dir(
    run_dir: Path, config: ResolvedConfig, *, resume: bool, overwrite: bool, is_main: bool
) -> None:
    """Create ``run_dir`` for a new run, or check it for ``resume``; refuse to clobber another run.

    The main process holds the run directory's lock (:func:`lock_run_dir`) when it calls this. Under
    several processes :func:`train` calls it on the main one only, once every rank has checked the
    directory: a rank checking while the main one writes would find the new run's own files.
    """
    existing = run_dir / CONFIG_FILE
    if resume:
        if not existing.exists():
            raise RunDirError(f"--resume {run_dir}: no {CONFIG_FILE} there; is this a trinity run directory?")
        return
    check_new_run_dir(run_dir, overwrite=overwrite)
    if is_main and overwrite and run_dir.is_dir():
        # Only what a run writes: anything else a user keeps there stays.
        for child in run_dir.iterdir():
            if child.name not in RUN_OUTPUTS:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        dump_yaml(run_dir / CONFIG_FILE, config.model_dump(mode="json"))


def check_new_run_dir(run_dir: Path, *, overwrite: bool) -> None:
    """Refuse a directory a new run would clobber: one that holds files, unless ``overwrite`` and it holds
    a run (its ``config.yaml``); a directory of other files is never overwritten.

    Raises:
        RunDirError: saying what the directory holds and what to do.
    """
    if not holds_files(run_dir):
        return
    if not overwrite:
        what = "a run" if (run_dir / CONFIG_FILE).exists() else "files"
        raise RunDirError(
            f"run directory {run_dir} already holds {what}; pass --resume {run_dir} to continue it, "
            "--overwrite to replace it, or choose another --run-dir"
        )
    if not (run_dir / CONFIG_FILE).exists():
        raise RunDirError(
            f"run directory {run_dir} holds files but no {CONFIG_FILE}: it does not look like a trinity run, "
            "so --overwrite will not delete them; choose another --run-dir"
        )


def default_run_dir(config: ResolvedConfig) -> Path:
    """``runs/<task>-<algorithm>-<YYYYmmdd-HHMMSS>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{config.tasks.label}-{config.algorithm.algorithm_type}-{stamp}"
