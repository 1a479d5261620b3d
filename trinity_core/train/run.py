"""Running ``trinity train``: the embedded default, ``--set`` overrides, the run directory, Accelerate.

Python API::

    from trinity_core.train import train
    result = train({"tasks": {"name": "copy"}}, run_dir="runs/copy", overrides=["trainer.total_steps=300"])
    print(result.eval_accuracy, result.run_dir)
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig, check_capabilities, resolve_config
from trinity_core.config.layers import apply_overrides
from trinity_core.config.loading import read_yaml_mapping
from trinity_core.extras import require_extra
from trinity_core.train.checkpoints.commit import CONFIG_FILE
from trinity_core.train.modes.accelerator import check_launch, make_accelerator

__all__ = [
    "DEFAULT_CONFIG",
    "RESUME_OVERRIDABLE",
    "RunDirError",
    "RunFinished",
    "apply_overrides",
    "check_launch",
    "lock_run_dir",
    "make_accelerator",
    "prepare_run_dir",
    "train",
]

DEFAULT_CONFIG: dict[str, Any] = {
    # Only what differs from the grpo preset (which brings the ppo loss, clip 0.2 and token-mean); with
    # `--set algorithm.algorithm_type=sapo` these rank below sapo's own defaults (config/layers.py).
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 16, "kl_loss_fn": "none"},
    "model": {"model_path": None},
    "tasks": {"name": "last_digit", "reward_fns": ["exact_match"], "eval_size": 100},
    "rollout": {"prompts_per_step": 16, "temperature": 1.0},
    "trainer": {
        "total_steps": 800,
        "lr": 3e-4,
        "optimizer": "adamw",
        "grad_clip": 1.0,
        "seed": 0,
        "device": "auto",
        "checkpoint_every": 200,
    },
}
"""The embedded default run (used when no ``--config`` is given): a ~332K-parameter Qwen2 with a
character tokenizer learns the last digit of a+b with GRPO (16 responses per prompt, 16 prompts per
step, AdamW lr 3e-4, clip 0.2, grad-norm 1.0, no KL, token-mean), 800 steps, fully offline."""

LOCK_FILE = ".lock"
"""Held (``filelock``) by the main process of the run writing the directory, for the run's lifetime."""

RESUME_OVERRIDABLE = (
    "trainer.total_steps",
    "trainer.checkpoint_every",
    "trainer.keep_checkpoints",
    "trainer.progress",
    "trainer.threads",
    "synchronizer.explorer_threads",
    "synchronizer.learner_threads",
    "synchronizer.explorer_process",
)
"""Keys ``--set`` may change on ``--resume``: none of them changes a step already trained."""


class RunDirError(ValueError):
    """The run directory cannot be used as asked (holds another run, is in use, cannot be written, or
    has nothing to resume)."""


class RunFinished(RunDirError):
    """``--resume`` of a run that already reached ``trainer.total_steps``: there is nothing to do."""


def _dump_yaml(path: Path, data: Any) -> None:
    yaml: Any = importlib.import_module("yaml")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def _holds_files(run_dir: Path) -> bool:
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


def _release(lock: FileLock, run_dir: Path, remove_if_unused: bool) -> None:
    """Release ``lock``; remove ``run_dir`` when this run created it and wrote nothing else into it."""
    if remove_if_unused and not _holds_files(run_dir):
        # Unlinked while still held, so that no other run can take a lock on a file about to vanish.
        with contextlib.suppress(OSError):
            (run_dir / LOCK_FILE).unlink()
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
    if _holds_files(run_dir):
        if not overwrite:
            what = "a run" if existing.exists() else "files"
            raise RunDirError(
                f"run directory {run_dir} already holds {what}; pass --resume {run_dir} to continue it, "
                "--overwrite to replace it, or choose another --run-dir"
            )
        if is_main:
            for child in run_dir.iterdir():
                if child.name == LOCK_FILE:
                    continue  # held by this run
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        _dump_yaml(run_dir / CONFIG_FILE, config.model_dump(mode="json"))


def default_run_dir(config: ResolvedConfig) -> Path:
    """``runs/<task>-<algorithm>-<YYYYmmdd-HHMMSS>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{config.tasks.label}-{config.algorithm.algorithm_type}-{stamp}"


def _check_resume_overrides(overrides: Sequence[str]) -> None:
    """Refuse ``--set`` keys that would change how the steps already trained were made."""
    problems = [
        ConfigProblem(
            key,
            "a resumed run keeps its saved config.yaml: changing this key would change the run already "
            "trained",
            hint=f"on --resume, --set accepts only {', '.join(RESUME_OVERRIDABLE)}",
        )
        for key in (item.partition("=")[0].strip() for item in overrides)
        if key not in RESUME_OVERRIDABLE
    ]
    if problems:
        raise ConfigError(problems)


def _hook_failure(exc: BaseException, pm: Any) -> Any | None:
    """The hook implementation whose code raised ``exc`` (outermost such frame), if any."""
    impls = {}
    for name in dir(pm.hook):
        caller = getattr(pm.hook, name)
        if hasattr(caller, "get_hookimpls"):
            for impl in caller.get_hookimpls():
                code = getattr(impl.function, "__code__", None)
                if code is not None:
                    impls[code] = (name, impl)
    tb = exc.__traceback__
    while tb is not None:
        found = impls.get(tb.tb_frame.f_code)
        if found is not None:
            return found
        tb = tb.tb_next
    return None


def _where_to_continue(run_dir: Path) -> str:
    """How to continue after a failure: from the last complete checkpoint, or from the start."""
    from trinity_core.train.checkpoints.commit import LATEST

    pointer = run_dir / "checkpoints" / LATEST
    if pointer.exists():
        name = pointer.read_text(encoding="utf-8").strip()
        return f"checkpoint {name} is intact: continue with trinity train --resume {run_dir}"
    return f"no checkpoint was written yet: start again with --overwrite --run-dir {run_dir}"


def _run(trainer: Any) -> Any:
    """``trainer.train()``, with a failing disk or plugin hook reported as one line."""
    from trinity_core.hooks import HookCallError

    try:
        return trainer.train()
    except OSError as exc:
        hint = "free disk space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "fix the cause"
        file = f" ({exc.filename})" if exc.filename else ""
        raise RunDirError(
            f"{exc.strerror or exc} while writing run directory {trainer.run_dir}{file}; {hint}, then "
            f"resume: {_where_to_continue(trainer.run_dir)}"
        ) from exc
    except Exception as exc:
        failed = _hook_failure(exc, trainer.pm)
        if failed is None:
            raise
        hook, impl = failed
        done = int(trainer.history[-1]["step"]) if trainer.history else trainer.start_step
        raise HookCallError(
            f"{hook} of {trainer.pm.describe_impl(impl)} raised after step {done}: {exc!r}; fix or uninstall "
            f"the plugin, then resume: {_where_to_continue(trainer.run_dir)}"
        ) from exc


def train(
    config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    overrides: Sequence[str] = (),
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    profile: bool = False,
) -> Any:
    """Resolve the configuration, lock and prepare the run directory, set up Accelerate, and train.

    Args:
        config: a mapping or YAML path; ``None`` is :data:`DEFAULT_CONFIG`.
        overrides: ``key.path=value`` strings applied on top (with ``resume``: only the keys of
            :data:`RESUME_OVERRIDABLE`, e.g. a larger ``trainer.total_steps`` to extend a finished run).
        run_dir: where the run is written (default :func:`default_run_dir`, or ``trainer.run_dir``).
        resume: a run directory to continue from its last intact checkpoint (its saved config is used).
        overwrite: replace an existing run directory.
        profile: time the parts of each step.

    Returns:
        :class:`~trinity_core.train.report.result.TrainResult`.

    Raises:
        RunDirError: the run directory is in use, cannot be written, holds another run, or (resume)
            holds no run; :class:`RunFinished` when a resumed run has no step left to train.
        ConfigError: an invalid configuration, or ``--config`` / a ``--set`` that cannot change on resume.
    """
    require_extra("train", "trinity train")
    resolved, run_path, saved = _resolve(config, overrides, run_dir, resume)
    if run_path is None:
        run_path = Path(resolved.trainer.run_dir) if resolved.trainer.run_dir else default_run_dir(resolved)
    acc = make_accelerator(resolved, run_path)
    if acc.num_processes > 1 and run_dir is None and resume is None and not resolved.trainer.run_dir:
        from accelerate.utils import broadcast_object_list

        holder = [str(run_path)]
        broadcast_object_list(holder)  # every rank writes where the main rank's clock named the run
        run_path = Path(holder[0])
    lock, created = None, False
    if acc.is_main_process:
        created = not run_path.exists()
        lock = lock_run_dir(run_path)
    try:
        return _start(
            resolved,
            run_path,
            acc,
            resume=resume is not None,
            overwrite=overwrite,
            profile=profile,
            saved=saved if overrides else None,
        )
    finally:
        if lock is not None:
            _release(lock, run_path, remove_if_unused=created)


def _resolve(
    config: Mapping[str, Any] | str | os.PathLike[str] | None,
    overrides: Sequence[str],
    run_dir: str | os.PathLike[str] | None,
    resume: str | os.PathLike[str] | None,
) -> tuple[ResolvedConfig, Path | None, dict[str, Any]]:
    """The run's resolved config, its directory when known, and (resume) the saved config's data with
    the overrides applied."""
    if resume is None:
        # The embedded default's algorithm keys rank below a preset the user switches to (layers.py).
        source = str(config) if isinstance(config, os.PathLike) else config
        resolved = resolve_config(source, overrides=overrides, embedded=DEFAULT_CONFIG)
        check_capabilities(resolved)  # before anything is written: a missing teacher, expert data, ...
        return resolved, Path(run_dir) if run_dir is not None else None, {}
    path = Path(resume)
    if config is not None:
        raise ConfigError(
            [ConfigProblem("--config", "a resumed run uses its saved config.yaml; drop --config")]
        )
    if run_dir is not None and Path(run_dir).resolve() != path.resolve():
        raise RunDirError(
            f"--resume {path} continues that run in its own directory; drop --run-dir {run_dir}"
        )
    _check_resume_overrides(overrides)
    if not (path / CONFIG_FILE).exists():
        raise RunDirError(f"--resume {path}: no {CONFIG_FILE} there; is this a trinity run directory?")
    data = apply_overrides(read_yaml_mapping(path / CONFIG_FILE), overrides)
    resolved = resolve_config(data)
    check_capabilities(resolved)
    return resolved, path, data


def _start(
    resolved: ResolvedConfig,
    run_path: Path,
    acc: Any,
    *,
    resume: bool,
    overwrite: bool,
    profile: bool,
    saved: dict[str, Any] | None,
) -> Any:
    """Check the run directory on every rank, build the run, prepare the directory, and train.

    ``saved``: a resumed run's config data with its ``--set`` overrides, written back to config.yaml so
    that a later ``--resume`` continues the extended run.
    """
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.report.reporting import init_trackers

    trainer = None
    try:
        if not resume and _holds_files(run_path) and not overwrite:
            prepare_run_dir(run_path, resolved, resume=False, overwrite=False, is_main=False)  # raises
        # Every rank has looked at the directory before the main one writes into it: a rank still
        # looking would take the main rank's fresh config.yaml for another run's.
        acc.wait_for_everyone()
        # Everything that can fail on bad input (task, rewards, components, model, checkpoint) is built
        # before the run directory is written.
        trainer = Runner(resolved, run_path, accelerator=acc, resume=resume, profile=profile)
        if resume and trainer.start_step >= trainer.total_steps:
            raise RunFinished(
                f"run {run_path} already trained {trainer.start_step} of trainer.total_steps = "
                f"{trainer.total_steps} steps: nothing to do; to train further, add --set "
                "trainer.total_steps=N with a larger N"
            )
        if acc.is_main_process:
            prepare_run_dir(run_path, resolved, resume=resume, overwrite=overwrite, is_main=True)
        if resume and saved is not None and acc.is_main_process:
            _dump_yaml(run_path / CONFIG_FILE, saved)
        acc.wait_for_everyone()
        init_trackers(acc, resolved)
        return _run(trainer)
    finally:
        if trainer is not None:
            trainer.event_loop.close()
