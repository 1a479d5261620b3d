"""The explorer: the step's tasks -> responses (a rollout or a workflow's episodes) -> rewards ->
experiences -> the experience pipeline and the add strategy or pipeline advantage -> the buffer.

:mod:`.explorer` (the step), :mod:`.experiences` and :mod:`.columnar` (a rollout's experiences as one
columnar batch), :mod:`.workflow_step` (workflows), :mod:`.behaviour` (the sampling log-probs that
travel with the experiences), :mod:`.evaluation` (held-out greedy and pass@k figures).

Imports: :mod:`trinity_core.train.data`, :mod:`trinity_core.train.models`, :mod:`trinity_core.train.report`
and the core. Never the learner or the modes: weights reach the explorer only through
:mod:`trinity_core.train.modes`.
"""

from __future__ import annotations

from trinity_core.train.explorer.explorer import Explored, Explorer

__all__ = ["Explored", "Explorer"]
