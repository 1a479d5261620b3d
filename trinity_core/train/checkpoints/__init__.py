"""Checkpoints of a run: the atomic commit with its manifest (:mod:`.commit`), Accelerate's
``save_state`` / ``load_state`` of the learner, the RNGs and the task stream (:mod:`.state`), and resuming
from the layout of one release back (:mod:`.legacy`).

Imports: :mod:`trinity_core.train.data` (a task's state) and the core; never the explorer, the learner
or the modes (the learner registers its own state through Accelerate).
"""
