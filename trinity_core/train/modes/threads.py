"""CPU thread budgets of the explorer and the learner while they run at the same time.

In mode ``async`` and in mode ``both`` with ``sync_offset > 0`` the two parts compute at once on the same
cores. If each used all of torch's threads, their OpenMP threads would oversubscribe the cores and spin
at every barrier, slowing a step many times over; so each part gets a budget
(``synchronizer.explorer_threads``, ``synchronizer.learner_threads``; unset: ``trainer.threads``, else
half of torch's threads). torch's thread count is per OS thread (OpenMP's and MKL's settings are), so the
explorer thread of mode ``both`` and the learner's thread each set their own; the explorer process of
mode ``async`` is started with ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` set to its budget and
``OMP_WAIT_POLICY=PASSIVE`` (unless the environment already says otherwise), which OpenMP reads only
when torch is imported there. The learner's process imported torch long before: start it with
``OMP_WAIT_POLICY=PASSIVE`` in the environment for the same effect on its side.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from trinity_core.config import ResolvedConfig
from trinity_core.train.modes.synchronizer import InlineExecutor

__all__ = ["ThreadBudget", "child_environment", "explorer_pool", "thread_budget", "use_threads"]


@dataclass(frozen=True)
class ThreadBudget:
    """torch CPU threads of each part while both compute at once."""

    explorer: int
    learner: int


def thread_budget(config: ResolvedConfig) -> ThreadBudget:
    """The run's budget: the ``synchronizer`` keys, else ``trainer.threads``, else half of torch's threads."""
    sync = config.synchronizer
    fallback = config.trainer.threads or max(1, torch.get_num_threads() // 2)
    return ThreadBudget(sync.explorer_threads or fallback, sync.learner_threads or fallback)


def use_threads(threads: int) -> int:
    """Set the calling OS thread's torch (OpenMP, MKL) thread count; returns the count it had."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    # torch applies its last process-wide setting to a thread on first use; using it now pins ours.
    torch.get_num_threads()
    return before


class _SplitExecutor(ThreadPoolExecutor):
    """One explorer thread with the explorer's budget; the creating (learner) thread gets the learner's
    budget until :meth:`shutdown`, which restores its former count."""

    def __init__(self, budget: ThreadBudget) -> None:
        self._restore = use_threads(budget.learner)
        super().__init__(1, "explorer", initializer=use_threads, initargs=(budget.explorer,))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the explorer thread (as :class:`ThreadPoolExecutor` does) and restore the thread count."""
        super().shutdown(wait, cancel_futures=cancel_futures)
        use_threads(self._restore)


def explorer_pool(config: ResolvedConfig) -> Executor:
    """Where mode ``both`` runs explorer steps: inline in lock step (``sync_offset: 0``, nothing changes),
    else one thread, the two parts with their :func:`thread_budget`."""
    if config.synchronizer.sync_offset == 0:
        return InlineExecutor()
    return _SplitExecutor(thread_budget(config))


@contextmanager
def child_environment(threads: int) -> Iterator[None]:
    """The environment a process spawned inside the block inherits: ``OMP_NUM_THREADS`` and
    ``MKL_NUM_THREADS`` set to ``threads``, ``OMP_WAIT_POLICY=PASSIVE`` unless already set (idle OpenMP
    threads sleep instead of spinning on cores the other part needs). Restored afterwards."""
    wanted = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    wanted["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
