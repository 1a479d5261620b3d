"""A run's checkpoint through Accelerate: ``accelerator.save_state`` into the temporary folder of
:mod:`~trinity_core.train.checkpoints.commit`, ``accelerator.load_state`` on resume.

Accelerate writes the prepared models (``model.safetensors`` = the policy, ``model_1.safetensors`` =
a PPO critic), their optimizers (``optimizer.bin``, ``optimizer_1.bin``), each rank's python / numpy /
torch / CUDA RNG states (``random_states_<rank>.pkl``), the fp16 loss scaler, and the objects registered
with ``register_for_checkpointing`` (``custom_checkpoint_<i>.pkl``, in the order of :func:`register`):
the LR scheduler, the buffer cursor, and every rank's task generator and task position. Under FSDP and
DeepSpeed it saves and loads sharded states its own way. ``state.json`` adds the step, the world size and
the mixed precision, which a resume must match.

Rotation stays :func:`~trinity_core.train.checkpoints.commit.commit`'s:
``ProjectConfiguration(total_limit=...)`` only rotates Accelerate's own ``checkpoint_<i>`` folders,
written in place, which would break the write-then-rename commit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from trinity_core.train.checkpoints import commit as ckpt
from trinity_core.train.checkpoints.commit import CheckpointError

__all__ = [
    "BufferCursor",
    "RankStates",
    "SchedulerState",
    "load_run",
    "load_run_from",
    "register",
    "save_run",
]

STATE = "state.json"
LAYOUT = "accelerate"
CRITIC_WEIGHTS = "model_1.safetensors"
"""Accelerate's name for the second prepared model's weights: the critic's."""


class RankStates:
    """Each rank's task generator, task position (a dataset's shuffled order and epoch, the task
    selectors' states) and replay buffer.

    Accelerate writes a registered object from the main process only, so :meth:`state_dict` gathers
    every rank's state (all ranks call it) and :meth:`load_state_dict` takes this rank's.
    """

    def __init__(self, accelerator: Any, task_generator: torch.Generator, task: Any) -> None:
        """Hold the objects whose state is saved; nothing is read yet."""
        self.acc, self.task_generator, self.task = accelerator, task_generator, task
        self.replay: Any = None

    def state_dict(self) -> dict[str, Any]:
        """``{"ranks": [{"task_generator": ByteTensor, "task": dict | None, "replay": dict | None}, ...]}``
        in rank order."""
        from accelerate.utils import gather_object

        task_state = self.task.state_dict() if hasattr(self.task, "state_dict") else None
        replay = self.replay.state_dict() if self.replay is not None else None
        mine = {"task_generator": self.task_generator.get_state(), "task": task_state, "replay": replay}
        ranks = gather_object([mine]) if self.acc.num_processes > 1 else [mine]
        return {"ranks": list(ranks)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore this rank's generator and task position.

        Raises:
            CheckpointError: the task refuses its saved position (its data changed).
        """
        mine = state["ranks"][self.acc.process_index]
        self.task_generator.set_state(mine["task_generator"])
        if mine["task"] is not None and hasattr(self.task, "load_state_dict"):
            from trinity_core.train.data.dataset_io import TaskDataError

            try:
                self.task.load_state_dict(mine["task"])
            except TaskDataError as exc:
                raise CheckpointError(str(exc)) from exc
        if mine.get("replay") is not None and self.replay is not None:
            self.replay.load_state_dict(mine["replay"])


class BufferCursor:
    """The learner's buffer reader, for ``register_for_checkpointing``.

    An in-memory buffer's items end with the process, so its cursor restarts at 0 on resume (the
    learner drains the buffer every step); a buffer whose items outlive the process gets its cursor back.
    """

    def __init__(self, reader: Any) -> None:
        """Wrap ``reader`` (a :class:`~trinity_core.buffer.base.BufferReader`)."""
        self.reader = reader

    def state_dict(self) -> dict[str, Any]:
        """The reader's cursor."""
        return dict(self.reader.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the cursor, unless the buffer lives in this process's memory."""
        from trinity_core.buffer.memory import MemoryReader

        if not isinstance(self.reader, MemoryReader):
            self.reader.load_state_dict(state)


class SchedulerState:
    """The learner's LR scheduler, for ``register_for_checkpointing``."""

    def __init__(self, scheduler: Any) -> None:
        """Wrap ``scheduler`` (a ``torch.optim.lr_scheduler.LRScheduler``)."""
        self.scheduler = scheduler

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state."""
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the scheduler's state."""
        self.scheduler.load_state_dict(state)


_REGISTERED: weakref.WeakKeyDictionary[Any, tuple[SchedulerState, BufferCursor, RankStates]] = (
    weakref.WeakKeyDictionary()
)


def register(accelerator: Any, learner: Any, task_generator: torch.Generator, task: Any) -> None:
    """Register the run's non-model states with ``accelerator`` before any save or load.

    A second trainer on the same accelerator (the Python API allows it) takes over the objects the
    first registered: Accelerate cannot unregister, and ``load_state`` wants one file per object.
    """
    held = _REGISTERED.get(accelerator)
    if held is None:
        held = (SchedulerState(None), BufferCursor(None), RankStates(accelerator, task_generator, task))
        accelerator.register_for_checkpointing(*held)
        _REGISTERED[accelerator] = held
    held[0].scheduler, held[1].reader = learner.scheduler, learner.reader
    held[2].task_generator, held[2].task = task_generator, task
    held[2].replay = getattr(learner, "replay", None)


def save_run(
    run_dir: Path, step: int, accelerator: Any, keep: int, extra: Callable[[Path], None] | None = None
) -> None:
    """Write the checkpoint of ``step`` atomically with ``accelerator.save_state`` (all ranks call it).

    ``extra(directory)``, called on every rank before the commit, writes more of the run's state into
    the checkpoint's directory (each rank its own files).
    """
    root = run_dir / "checkpoints"
    tmp = root / f".tmp-{ckpt.step_dir_name(step)}"
    if accelerator.is_main_process:
        ckpt.begin(root, step)
    accelerator.wait_for_everyone()
    with _tied_weights_quiet():
        accelerator.save_state(str(tmp))
    if extra is not None:
        extra(tmp)
    if accelerator.is_main_process:
        meta = {
            "step": step,
            "world_size": accelerator.num_processes,
            "mixed_precision": str(accelerator.mixed_precision),
            "layout": LAYOUT,
        }
        (tmp / STATE).write_text(json.dumps(meta), encoding="utf-8")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        ckpt.commit(root, tmp, step, keep)
    accelerator.wait_for_everyone()


class _TiedWeightsNote(logging.Filter):
    """Drops Accelerate's note that a tied weight (``lm_head.weight`` = the embeddings) is saved once: the
    loading side ties it again, so the note said nothing a user could act on, at every checkpoint."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the tied-weights note, True for everything else."""
        return "Removed shared tensor" not in record.getMessage()


@contextlib.contextmanager
def _tied_weights_quiet() -> Iterator[None]:
    """Without the tied-weights note while the block runs (see :class:`_TiedWeightsNote`)."""
    note, logger = _TiedWeightsNote(), logging.getLogger("accelerate.utils.other")
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)


def check_compatible(path: Path, meta: dict[str, Any], accelerator: Any, run_dir: Path) -> None:
    """Refuse a checkpoint written with another world size or mixed precision than this run's.

    Raises:
        CheckpointError: naming both values and how to resume.
    """
    saved, world = int(meta["world_size"]), accelerator.num_processes
    if saved != world:
        raise CheckpointError(
            f"{path} was written by {saved} processes, this run has {world}: optimizer and RNG states "
            f"are per process; relaunch with {saved} processes (`torchrun --nproc_per_node {saved} "
            f"$(which trinity) train --resume {run_dir}`)"
        )
    precision, now = meta.get("mixed_precision"), str(accelerator.mixed_precision)
    if precision is not None and precision != now:
        raise CheckpointError(
            f"{path} was written with trainer.mixed_precision {precision}, this run has {now}; set "
            f"trainer.mixed_precision: {precision} in {run_dir / ckpt.CONFIG_FILE} to resume it"
        )


def load_run(
    run_dir: Path, accelerator: Any, learner: Any, task_generator: torch.Generator, task: Any = None
) -> int:
    """Restore the last intact checkpoint of ``run_dir`` (this layout or the one before, see
    :mod:`~trinity_core.train.checkpoints.legacy`); return its step (:func:`load_run_from` also gives its
    directory).

    The metrics of steps after the checkpoint are dropped from ``metrics.jsonl`` (they are replayed).

    Raises:
        CheckpointError: no intact checkpoint, another world size or precision, or states that do not
            fit this run (another model, no critic).
    """
    return load_run_from(run_dir, accelerator, learner, task_generator, task)[0]


def load_run_from(
    run_dir: Path, accelerator: Any, learner: Any, task_generator: torch.Generator, task: Any = None
) -> tuple[int, Path]:
    """:func:`load_run`, returning the step and the checkpoint directory it restored."""
    path, meta = _restore_newest(run_dir, accelerator, learner, task_generator, task)
    step = int(meta["step"])
    metrics = run_dir / "metrics.jsonl"
    if accelerator.is_main_process and metrics.exists():
        kept = [r for r in ckpt.read_metrics(metrics) if r["step"] <= step]
        tmp = run_dir / ".metrics.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        os.replace(tmp, metrics)
    accelerator.wait_for_everyone()
    return step, path


def _restore_newest(
    run_dir: Path, accelerator: Any, learner: Any, task_generator: torch.Generator, task: Any
) -> tuple[Path, dict[str, Any]]:
    """Load the newest intact checkpoint into the run; return it and its ``state.json``.

    A checkpoint without a manifest (written before manifests) is only checked for its files' presence;
    when such a one does not load (a truncated optimizer state, say), the next older intact checkpoint
    is loaded instead, with a warning. A checkpoint with a manifest was written whole: when it does not
    load, this run differs from the one that wrote it, which is the error.
    """
    from trinity_core.train.checkpoints.legacy import is_legacy, load_legacy

    failed: list[str] = []
    for path in ckpt.intact_checkpoints(run_dir):
        meta = json.loads((path / STATE).read_text(encoding="utf-8"))
        check_compatible(path, meta, accelerator, run_dir)
        try:
            if is_legacy(path):
                load_legacy(path, meta, accelerator, learner, task_generator, task)
            else:
                _load_state(path, accelerator, learner)
        except CheckpointError as exc:
            if (path / ckpt.MANIFEST).exists():
                raise
            failed.append(f"checkpoint {path} (no {ckpt.MANIFEST}) does not load: {exc}")
            continue
        if failed:
            ckpt.warn(f"{'; '.join(failed)}; resumed from {path.name} instead")
        return path, meta
    if failed:
        raise CheckpointError(
            f"{'; '.join(failed)}; no older intact checkpoint: start a new run (--overwrite)"
        )
    raise CheckpointError(
        f"--resume {run_dir}: no complete checkpoint in {run_dir / 'checkpoints'}; start a "
        "new run (--overwrite) instead"
    )


def _load_state(path: Path, accelerator: Any, learner: Any) -> None:
    """``accelerator.load_state(path)``, with its failures as one-line :class:`CheckpointError`."""
    if getattr(learner, "critic", None) is not None and not (path / CRITIC_WEIGHTS).is_file():
        raise CheckpointError(
            f"{path} holds no critic ({CRITIC_WEIGHTS} missing): it was written by a run without one; "
            "resume it with the same algorithm, or start a new run (--overwrite)"
        )
    try:
        accelerator.load_state(str(path))
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc
    except (RuntimeError, ValueError, KeyError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path} does not fit this run ({first}); resume it with the config.yaml it was written "
            "with, or start a new run (--overwrite)"
        ) from exc
