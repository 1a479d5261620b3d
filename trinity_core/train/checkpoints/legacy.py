"""Resuming from checkpoints written before checkpoints went through Accelerate (one release back).

That layout held ``model.safetensors``, ``optimizer.safetensors`` + ``optimizer.json``, ``state.json``
(step, world size, scheduler, buffer, python RNG), ``rng-rank<r>.safetensors`` (torch RNG and task
generator), ``task-rank<r>.json`` and, with a critic, ``critic*.safetensors`` + ``critic-optimizer.json``.
New checkpoints are written by :mod:`~trinity_core.train.checkpoints.state`; this module only reads.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from trinity_core.train.checkpoints.commit import CheckpointError, load_optimizer_state

__all__ = ["is_legacy", "load_legacy"]


def is_legacy(directory: Path) -> bool:
    """Whether ``directory`` is a checkpoint in the layout before Accelerate's ``save_state``."""
    return (directory / "optimizer.json").is_file()


def _set_python_rng_state(state: list[Any]) -> None:
    random.setstate((state[0], tuple(state[1]), state[2]))


def _load_rng_state(path: Path, task_generator: torch.Generator) -> None:
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


def load_legacy(
    path: Path,
    meta: dict[str, Any],
    accelerator: Any,
    learner: Any,
    task_generator: torch.Generator,
    task: Any,
) -> None:
    """Restore the legacy checkpoint ``path`` (its ``state.json`` already read into ``meta``) into
    ``learner``, the RNGs and ``task``'s position in its data.

    Raises:
        CheckpointError: the weights or the critic do not fit this run, or the task's position is invalid.
    """
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
    _set_python_rng_state(meta["python_rng"])
    _load_rng_state(path / f"rng-rank{accelerator.process_index}.safetensors", task_generator)
    task_state = path / f"task-rank{accelerator.process_index}.json"
    if task is not None and task_state.exists():  # checkpoints from before tasks saved a position have none
        from trinity_core.train.data.dataset_io import TaskDataError

        try:
            task.load_state_dict(json.loads(task_state.read_text(encoding="utf-8")))
        except TaskDataError as exc:
            raise CheckpointError(f"{path}: {exc}") from exc
