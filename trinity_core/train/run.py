"""Running ``trinity train``: the embedded default, ``--set`` overrides, the run directory, Accelerate.

Python API::

    from trinity_core.train import train
    result = train({"tasks": {"name": "copy"}}, run_dir="runs/copy", overrides=["trainer.total_steps=300"])
    print(result.eval_accuracy, result.run_dir)
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig, check_capabilities, resolve_config
from trinity_core.config.layers import apply_overrides
from trinity_core.config.loading import read_yaml_mapping
from trinity_core.extras import require_extra
from trinity_core.train.checkpoints.commit import CONFIG_FILE
from trinity_core.train.checkpoints.run_dir import (
    RunDirError,
    check_new_run_dir,
    default_run_dir,
    dump_yaml,
    lock_run_dir,
    path_exists,
    prepare_run_dir,
    release_run_dir,
)
from trinity_core.train.modes.accelerator import check_launch, make_accelerator
from trinity_core.train.report.result import SUMMARY_FILE

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
    # No reward_fns: the task's own defaults (exact_match for last_digit), so `--set tasks.name=...` to a
    # task whose workflow scores episodes itself needs no reward override.
    "tasks": {"name": "last_digit", "eval_size": 100},
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

RESUME_OVERRIDABLE = (
    "trainer.total_steps",
    "trainer.checkpoint_every",
    "trainer.keep_checkpoints",
    "trainer.progress",
    "trainer.progress_metrics",
    "trainer.threads",
    "synchronizer.explorer_threads",
    "synchronizer.learner_threads",
    "synchronizer.explorer_process",
    "synchronizer.explorer_restarts",
)
"""Keys ``--set`` may change on ``--resume``: none of them changes a step already trained."""


class RunFinished(RunDirError):
    """``--resume`` of a run that already reached ``trainer.total_steps``: there is nothing to do."""


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
    from trinity_core.train.checkpoints.commit import CheckpointError, latest_checkpoint

    try:
        path = latest_checkpoint(run_dir, warn=lambda message: None)
    except CheckpointError:
        path = None
    if path is not None:
        return f"checkpoint {path.name} is intact: continue with trinity train --resume {run_dir}"
    return f"no intact checkpoint was written yet: start again with --overwrite --run-dir {run_dir}"


def _run(trainer: Any) -> Any:
    """``trainer.train()``, with a failing disk, plugin component or hook reported as one line that says
    where to continue from."""
    from trinity_core.components.faults import ComponentFault
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
    except (ComponentFault, HookCallError) as exc:
        # The cause stays the plugin's own exception (what --debug shows first).
        raise type(exc)(
            f"{exc}; fix or uninstall the plugin, then resume: {_where_to_continue(trainer.run_dir)}"
        ) from (exc.__cause__ or exc)
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
        created = not path_exists(run_path)
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
            release_run_dir(lock, run_path, remove_if_unused=created)


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
        if not resume:
            check_new_run_dir(run_path, overwrite=overwrite)
        # Every rank has looked at the directory before the main one writes into it: a rank still
        # looking would take the main rank's fresh config.yaml for another run's.
        acc.wait_for_everyone()
        # Everything that can fail on bad input (task, rewards, components, model, checkpoint) is built
        # before the run directory is written.
        trainer = Runner(resolved, run_path, accelerator=acc, resume=resume, profile=profile)
        # A run killed after its last checkpoint but before its summary has no step left to train; it
        # goes on to write its end (evaluation, model/, plot.png, summary.json, which is written last).
        if resume and trainer.start_step >= trainer.total_steps and (run_path / SUMMARY_FILE).exists():
            raise RunFinished(
                f"run {run_path} already trained {trainer.start_step} of trainer.total_steps = "
                f"{trainer.total_steps} steps: nothing to do; to train further, add --set "
                "trainer.total_steps=N with a larger N"
            )
        if acc.is_main_process:  # the runner's config: what the launch resolved (synchronizer.explorers)
            prepare_run_dir(run_path, trainer.config, resume=resume, overwrite=overwrite, is_main=True)
        if resume and saved is not None and acc.is_main_process:
            dump_yaml(run_path / CONFIG_FILE, saved)
        acc.wait_for_everyone()
        init_trackers(acc, resolved)
        return _run(trainer)
    finally:
        if trainer is not None:
            trainer.event_loop.close()
