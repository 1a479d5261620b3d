"""The learner: the buffer's batch -> staleness filter -> no-grad passes (old, reference, critic,
teacher) -> trainer-side advantages -> the update -> metrics. It owns the weights.

:mod:`.learner` (the step), :mod:`.update` (log-probs, optimizer, micro-batches), :mod:`.trim`
(padding trim), :mod:`.balance` (tokens balanced over ranks), :mod:`.critic`, :mod:`.teacher`,
:mod:`.expert` (MIX's expert rows).

Imports: :mod:`trinity_core.train.data`, :mod:`trinity_core.train.models`,
:mod:`trinity_core.train.checkpoints`, :mod:`trinity_core.train.report` and the core. Never the explorer
(the learner reads only what the buffer holds) nor the modes.
"""

from __future__ import annotations

from trinity_core.train.learner.learner import Learner, check_loss_inputs

__all__ = ["Learner", "check_loss_inputs"]
