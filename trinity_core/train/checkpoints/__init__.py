"""Checkpoints of a run, through one entry: :func:`register` the run's state once, :func:`save_run` after
a step, :func:`load_run` on resume (the newest intact checkpoint).

Inside: the atomic commit with its manifest (:mod:`.commit`), Accelerate's ``save_state`` /
``load_state`` of the learner, the RNGs and the task stream (:mod:`.state`), and resuming from the
layout of one release back (:mod:`.legacy`).

Imports: :mod:`trinity_core.train.data` (a task's state) and the core; never the explorer, the learner
or the modes (the learner registers its own state through Accelerate).
"""

from __future__ import annotations

from trinity_core.train.checkpoints.commit import CheckpointError, latest_checkpoint, read_metrics
from trinity_core.train.checkpoints.state import load_run, load_run_from, register, save_run

__all__ = [
    "CheckpointError",
    "latest_checkpoint",
    "load_run",
    "load_run_from",
    "read_metrics",
    "register",
    "save_run",
]
