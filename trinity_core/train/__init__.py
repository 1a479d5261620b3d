"""``trinity train``: reinforcement fine-tuning on Accelerate (see docs/training.md).

Modules: :mod:`~trinity_core.train.model` (policy and tokenizer), :mod:`~trinity_core.train.tasks`
(task sets), :mod:`~trinity_core.train.rewards` (reward functions), :mod:`~trinity_core.train.rollout`
(sampling), :mod:`~trinity_core.train.explorer` and :mod:`~trinity_core.train.learner` (the two
parts of a step), :mod:`~trinity_core.train.synchronizer`, :mod:`~trinity_core.train.runner` (the
modes), :mod:`~trinity_core.train.teacher` and :mod:`~trinity_core.train.expert` (distillation's
teacher, MIX's expert rows), :mod:`~trinity_core.train.loop` (``Trainer``),
:mod:`~trinity_core.train.checkpoint` (atomic commit, manifest) with
:mod:`~trinity_core.train.checkpoint_state` (Accelerate's ``save_state``), :mod:`~trinity_core.train.profile`,
:mod:`~trinity_core.train.plot`, :mod:`~trinity_core.train.run`.

Training needs ``pip install 'trinity-core[train]'``; without it :func:`train` raises
:class:`~trinity_core.extras.MissingExtraError` naming that line. The tasks and reward functions import
without it (``trinity plugins list`` shows them on a core installed alone).
"""

from __future__ import annotations

from trinity_core.train.dataset_io import TaskDataError
from trinity_core.train.rewards import exact_match
from trinity_core.train.run import DEFAULT_CONFIG, RunDirError, apply_overrides, train
from trinity_core.train.tasks import Task

__all__ = [
    "DEFAULT_CONFIG",
    "RunDirError",
    "Task",
    "TaskDataError",
    "apply_overrides",
    "exact_match",
    "train",
]
