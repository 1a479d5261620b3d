"""Running ``trinity train``: the embedded default, ``--set`` overrides, the run directory, Accelerate.

Python API::

    from trinity_core.train import train
    result = train({"tasks": {"name": "copy"}}, run_dir="runs/copy", overrides=["trainer.total_steps=300"])
    print(result.eval_accuracy, result.run_dir)
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig, read_yaml, resolve_config
from trinity_core.extras import require_extra

__all__ = [
    "DEFAULT_CONFIG",
    "RunDirError",
    "apply_overrides",
    "check_launch",
    "make_accelerator",
    "prepare_run_dir",
    "train",
]

DEFAULT_CONFIG: dict[str, Any] = {
    # Only what differs from the grpo preset (which brings the ppo loss, clip 0.2 and token-mean), so
    # `--set algorithm.algorithm_type=sapo` gets sapo's own components rather than grpo's leftovers.
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

CONFIG_FILE = "config.yaml"


class RunDirError(ValueError):
    """The run directory cannot be used as asked (holds another run, or has nothing to resume)."""


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a copy of ``data``."""
    yaml: Any = importlib.import_module("yaml")
    out = copy.deepcopy(data)
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append(ConfigProblem("--set", f"{item!r} is not key.path=value (e.g. trainer.lr=1e-4)"))
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
            if isinstance(value, str):  # YAML 1.1 reads 1e-4 as a string
                with contextlib.suppress(ValueError):
                    value = float(value)
        except yaml.YAMLError as exc:
            problems.append(ConfigProblem(key, f"--set value {raw!r} is not valid YAML: {exc}"))
            continue
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                problems.append(ConfigProblem(key, f"--set: {part!r} is a value, not a section"))
                break
            node = child
        else:
            node[parts[-1]] = value
    if problems:
        raise ConfigError(problems)
    return out


def _dump_yaml(path: Path, data: Any) -> None:
    yaml: Any = importlib.import_module("yaml")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def prepare_run_dir(
    run_dir: Path, config: ResolvedConfig, *, resume: bool, overwrite: bool, is_main: bool
) -> None:
    """Create ``run_dir`` for a new run, or check it for ``resume``; refuse to clobber another run."""
    existing = run_dir / CONFIG_FILE
    if resume:
        if not existing.exists():
            raise RunDirError(f"--resume {run_dir}: no {CONFIG_FILE} there; is this a trinity run directory?")
        return
    if run_dir.exists() and any(run_dir.iterdir()):
        if not overwrite:
            what = "a run" if existing.exists() else "files"
            raise RunDirError(
                f"run directory {run_dir} already holds {what}; pass --resume {run_dir} to continue it, "
                "--overwrite to replace it, or choose another --run-dir"
            )
        if is_main:
            shutil.rmtree(run_dir)
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        _dump_yaml(run_dir / CONFIG_FILE, config.model_dump(mode="json"))


def make_accelerator(config: ResolvedConfig, run_dir: Path) -> Any:
    """An ``Accelerator`` for the config; checks that the launcher's processes all joined the run.

    Raises:
        LaunchError: ``WORLD_SIZE`` says N processes but Accelerate sees another number (e.g.
            ``accelerate launch --cpu --num_processes 2``, or ``--multi_gpu`` without a usable backend).
    """
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    tcfg = config.trainer
    cpu = tcfg.device == "cpu" or (tcfg.device == "auto" and not torch.cuda.is_available())
    if tcfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError([ConfigProblem("trainer.device", "cuda requested but no CUDA device is available")])
    if tcfg.threads is not None:
        torch.set_num_threads(tcfg.threads)
    trackers: Any = tcfg.trackers
    if trackers == "auto":
        trackers = ["tensorboard"] if importlib.util.find_spec("tensorboard") else []
    acc = Accelerator(
        cpu=cpu,
        mixed_precision=tcfg.precision,
        log_with=trackers or None,
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir / "logs")),
    )
    check_launch(acc.num_processes, os.environ)
    return acc


def check_launch(num_processes: int, environ: Mapping[str, str]) -> None:
    """Raise :class:`~trinity_core.train.loop.LaunchError` unless ``num_processes == WORLD_SIZE``.

    Catches launches where every process would train alone (duplicated work, diverging copies).
    """
    from trinity_core.train.loop import LaunchError

    expected = int(environ.get("WORLD_SIZE", "1"))
    if num_processes != expected:
        raise LaunchError(
            f"the launcher started {expected} processes (WORLD_SIZE={expected}) but Accelerate sees "
            f"{num_processes}: each process would train alone and duplicate the work. On CPU launch with "
            "`accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N` (not "
            "`accelerate launch --cpu --num_processes N`)"
        )


def default_run_dir(config: ResolvedConfig) -> Path:
    """``runs/<task>-<algorithm>-<YYYYmmdd-HHMMSS>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{config.tasks.name or 'last_digit'}-{config.algorithm.algorithm_type}-{stamp}"


def train(
    config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    overrides: Sequence[str] = (),
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    profile: bool = False,
) -> Any:
    """Resolve the configuration, prepare the run directory and Accelerate, and train.

    Args:
        config: a mapping or YAML path; ``None`` is :data:`DEFAULT_CONFIG`.
        overrides: ``key.path=value`` strings applied on top.
        run_dir: where the run is written (default :func:`default_run_dir`, or ``trainer.run_dir``).
        resume: a run directory to continue from its last checkpoint (its saved config is used).
        overwrite: replace an existing run directory.
        profile: time the parts of each step.

    Returns:
        :class:`~trinity_core.train.loop.TrainResult`.
    """
    require_extra("train", "trinity train")
    from trinity_core.train.loop import Trainer

    if resume is not None:
        if config is not None or overrides:
            raise ConfigError(
                [ConfigProblem("--resume", "a resumed run uses its saved config; drop --config/--set")]
            )
        path = Path(resume)
        if not (path / CONFIG_FILE).exists():
            raise RunDirError(f"--resume {path}: no {CONFIG_FILE} there; is this a trinity run directory?")
        data = read_yaml(path / CONFIG_FILE)
        run_path = path
    else:
        data = DEFAULT_CONFIG if config is None else config
        if not isinstance(data, Mapping):
            data = read_yaml(data) or {}
        data = apply_overrides(dict(data), overrides)
        run_path = Path(run_dir) if run_dir is not None else None  # type: ignore[assignment]
    resolved = resolve_config(data)
    if run_path is None:
        run_path = Path(resolved.trainer.run_dir) if resolved.trainer.run_dir else default_run_dir(resolved)
    acc = make_accelerator(resolved, run_path)
    if acc.num_processes > 1 and run_dir is None and resume is None and not resolved.trainer.run_dir:
        from accelerate.utils import broadcast_object_list

        holder = [str(run_path)]
        broadcast_object_list(holder)
        run_path = Path(holder[0])
    if resume is None and run_path.exists() and any(run_path.iterdir()) and not overwrite:
        prepare_run_dir(run_path, resolved, resume=False, overwrite=False, is_main=False)  # raises
    # Everything that can fail on bad input (task, rewards, components, model) is built before the
    # run directory is written.
    trainer = Trainer(resolved, run_path, accelerator=acc, resume=resume is not None, profile=profile)
    prepare_run_dir(
        run_path, resolved, resume=resume is not None, overwrite=overwrite, is_main=acc.is_main_process
    )
    acc.wait_for_everyone()
    if acc.log_with:
        acc.init_trackers("trinity")
    return trainer.train()
