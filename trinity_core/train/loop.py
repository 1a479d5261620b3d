"""``Trainer``, the public entry of ``trinity train``: a run of the explorer and the learner.

A step is two parts with one job each, wired by :class:`~trinity_core.train.runner.Runner` for the
run's ``mode``:

* :mod:`trinity_core.train.explorer`: sample tasks -> rollout -> rewards -> experiences -> hooks ->
  add strategy or group advantage -> buffer;
* :mod:`trinity_core.train.learner`: buffer -> batch -> trainer-side advantages -> update -> metrics;
* :mod:`trinity_core.train.synchronizer`: the learner's weights back to the explorer (interval, offset,
  versions, staleness).

Read the explorer, then the learner, to follow one step from rollout to optimizer.
"""

from __future__ import annotations

from trinity_core.train.runner import LaunchError, Runner, TrainResult
from trinity_core.train.update import lr_scheduler, response_logprobs

__all__ = ["LaunchError", "TrainResult", "Trainer", "lr_scheduler", "response_logprobs"]


class Trainer(Runner):
    """One run of ``trinity train``: built from a resolved config and a run directory; :meth:`train`
    runs every step (see :class:`~trinity_core.train.runner.Runner`)."""
