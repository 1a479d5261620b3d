"""``trinity train``: reinforcement fine-tuning on Accelerate (see docs/training.md, docs/architecture.md).

The packages, in the order the data flows through a step:

* :mod:`~trinity_core.train.data`: task sets, datasets, prompts, reward functions, stored experiences;
* :mod:`~trinity_core.train.explorer`: tasks -> responses -> rewards -> experiences -> the buffer;
* :mod:`~trinity_core.train.learner`: the buffer's batch -> the update of the policy;
* :mod:`~trinity_core.train.modes`: who runs the explorer and the learner, and weights back;
* :mod:`~trinity_core.train.models`, :mod:`~trinity_core.train.checkpoints`,
  :mod:`~trinity_core.train.report`: the policy as an object, checkpoints, what a run shows.

Entry points: :mod:`~trinity_core.train.run` (``trinity train``), :mod:`~trinity_core.train.eval_run`
(``trinity eval``), :mod:`~trinity_core.train.export` (``trinity export``), :mod:`~trinity_core.train.build`
(the algorithm's components from the config).

Training needs ``pip install 'trinity-core[train]'``; without it :func:`train` raises
:class:`~trinity_core.extras.MissingExtraError` naming that line. The tasks and reward functions import
without it (``trinity plugins list`` shows them on a core installed alone).
"""

from __future__ import annotations

from trinity_core.train import _moved
from trinity_core.train.data.dataset_io import TaskDataError
from trinity_core.train.data.rewards import exact_match
from trinity_core.train.data.tasks import Task
from trinity_core.train.run import DEFAULT_CONFIG, RunDirError, apply_overrides, train

_moved.install()  # the module names of the flat layout, with a warning, for one release

__all__ = [
    "DEFAULT_CONFIG",
    "RunDirError",
    "Task",
    "TaskDataError",
    "apply_overrides",
    "exact_match",
    "train",
]
