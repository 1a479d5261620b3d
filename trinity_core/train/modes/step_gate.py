"""Mode ``both``'s explorer process kept exactly ``sync_offset`` steps ahead of the learner.

With ``synchronizer.explorer_process`` the explorer of mode ``both`` runs in a process of its own (the
machinery of mode ``async``), yet samples with the same weight versions as the explorer thread does:

* the explorer starts rollout ``t`` only once the learner has finished step ``t - sync_offset - 1``
  and published its weights (when due), so it never runs further ahead than ``sync_offset``;
* the learner publishes the weights of step ``s`` only once the explorer has started rollout
  ``s + sync_offset``, so those weights never reach a rollout the explorer thread would have made with
  older ones. With several explorer processes on a machine, each has its own counter and the learner
  waits for every one of them.

So each rollout's weight version follows from the step numbers alone, whatever the two processes'
timing; the run is reproducible and its staleness is that of the thread. Both sides wait on one shared
condition, in slices of ``poll_s`` seconds, checking the other side between slices.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["StepGate"]


class StepGate:
    """Two shared step counters and the condition both processes wait on.

    Made in the learner process and handed to the explorer process when it is spawned.

    Args:
        ctx: the multiprocessing context whose condition and shared values both processes use
            (:func:`~trinity_core.train.modes.async_mode.explorer_context`).
        offset: ``synchronizer.sync_offset`` (at least 1).
        start_step: the run's first step (0, or the step a resumed run continues from).
        explorers: the explorer processes that wait on this gate (those of one machine).
    """

    def __init__(self, ctx: Any, offset: int, start_step: int, explorers: int = 1) -> None:
        """Every counter at ``start_step - 1``: nothing learned, no rollout started yet."""
        self.offset = offset
        self.condition = ctx.Condition()
        self.learned = ctx.Value("q", start_step - 1, lock=False)
        """The last learner step finished, its weights published when due."""
        self.started = ctx.Array("q", [start_step - 1] * explorers, lock=False)
        """Per explorer (its slot), the last rollout it started (its weights loaded)."""

    # ------------------------------------------------------------------ the explorer's side

    def explorer_may_start(self, step: int) -> bool:
        """Whether rollout ``step`` may start: the learner has finished step ``step - offset - 1``."""
        return int(self.learned.value) >= step - self.offset - 1

    def mark_started(self, step: int, slot: int = 0) -> None:
        """The explorer of ``slot`` has loaded its weights for rollout ``step`` and starts it."""
        with self.condition:
            self.started[slot] = step
            self.condition.notify_all()

    # ------------------------------------------------------------------ the learner's side

    def learner_may_publish(self, step: int) -> bool:
        """Whether the weights of learner step ``step`` may be published: every explorer has started
        rollout ``step + offset`` (every rollout before it keeps the older weights)."""
        return bool(min(self.started[:]) >= step + self.offset)

    def mark_learned(self, step: int) -> None:
        """The learner has finished step ``step`` and published its weights (when due)."""
        with self.condition:
            self.learned.value = step
            self.condition.notify_all()

    # ------------------------------------------------------------------ waiting

    def wait(
        self,
        ready: Callable[[], bool],
        check: Callable[[], None],
        *,
        timeout: float,
        poll_s: float,
        what: str,
    ) -> float:
        """Wait until ``ready()``; return the seconds waited.

        ``check`` runs between slices of ``poll_s`` seconds and raises when the other side is gone.

        Raises:
            TimeoutError: ``ready()`` stayed false for ``timeout`` seconds (the message says ``what`` was
                awaited).
        """
        start = time.perf_counter()
        with self.condition:
            while not ready():
                check()
                if time.perf_counter() - start > timeout:
                    raise TimeoutError(
                        f"waited {timeout:g}s for {what}; raise synchronizer.timeout if steps are that slow"
                    )
                self.condition.wait(poll_s)
        return time.perf_counter() - start
