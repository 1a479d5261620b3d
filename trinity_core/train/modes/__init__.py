"""The modes of a run: who runs the explorer and the learner, where, and how the weights go back.

:mod:`.runner` (builds the parts and runs ``both`` / ``explore`` / ``train``), :mod:`.async_mode` and
:mod:`.explorer_process` (an explorer in a process of its own), :mod:`.step_gate` (that process kept
``sync_offset`` steps ahead), :mod:`.synchronizer` (weights learner -> explorer), :mod:`.threads` (CPU
thread budgets), :mod:`.periodic` (evaluation and export during a run), :mod:`.accelerator` and
:mod:`.sharding` (the launch).

Imports: every other package of ``train``; nothing in ``train`` imports it but the entry points
(:mod:`trinity_core.train.run`).
"""
