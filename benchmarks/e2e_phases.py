"""One clock for both sides of ``bench_e2e.py``: the same step span, cut into the same phases.

A step's span runs from fetching its prompts to the end of ``optimizer.step()``. It is cut into
contiguous phases at the same boundaries on both sides, each found by wrapping a method in the bench
process (neither trinity's nor TRL's code is edited):

==================== =================================================================================
phase                from ... to ...
==================== =================================================================================
``generation``       the step's start (trinity ``Explorer.rollout``, TRL ``Trainer.get_batch_samples``)
                     to the end of the model's ``generate`` call (prompt encoding and a shared
                     prompt's prefill included)
``reward_advantage`` the end of ``generate`` to the first log-prob pass: decoding, rewards, advantages,
                     the batch (trinity's buffer, TRL's shuffle and split)
``logprobs``         inside a no-grad log-prob call (old / reference log-probs; zero in the default
                     runs of both sides, which need neither)
``forward_backward`` the first log-prob call with autograd on to the gradient clip: every micro-batch's
                     forward, loss and backward and what the loop does between them
``optimizer``        ``Accelerator.clip_grad_norm_`` to the end of ``optimizer.step()`` (a global torch
                     optimizer post-hook)
==================== =================================================================================

Each phase gets wall time (``time.perf_counter``) and the process's CPU time (``time.process_time``),
which other work on a shared machine disturbs far less than wall time.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PHASES", "PhaseClock", "instrument_trinity", "instrument_trl"]

PHASES = ("generation", "reward_advantage", "logprobs", "forward_backward", "optimizer")


class PhaseClock:
    """Contiguous phases of each step; ``steps`` holds one record per finished step.

    A record is ``{"wall": s, "cpu": s, "phases": {phase: [wall s, cpu s]}}``; the phases of a step add up
    to its span. Calls outside a step (evaluation, set-up) are not counted.
    """

    def __init__(
        self, wall: Callable[[], float] = time.perf_counter, cpu: Callable[[], float] = time.process_time
    ) -> None:
        self._wall, self._cpu = wall, cpu
        self.steps: list[dict[str, Any]] = []
        self.phase: str | None = None
        self._open: dict[str, Any] | None = None
        self.before_step: Callable[[], None] | None = None
        """Called as a step begins, before its clock starts (``bench_e2e.py`` stops a run there)."""

    def begin_step(self) -> None:
        """The step's prompts are about to be fetched: its span and its ``generation`` phase start."""
        if self.before_step is not None:
            self.before_step()
        now = (self._wall(), self._cpu())
        self._open = {"start": now, "last": now, "phases": {p: [0.0, 0.0] for p in PHASES}}
        self.phase = "generation"

    def enter(self, phase: str) -> None:
        """The time since the last boundary goes to the current phase; ``phase`` starts now."""
        if self._open is None or self.phase is None:
            return
        now = (self._wall(), self._cpu())
        last, acc = self._open["last"], self._open["phases"][self.phase]
        acc[0] += now[0] - last[0]
        acc[1] += now[1] - last[1]
        self._open["last"] = now
        self.phase = phase

    def end_step(self) -> None:
        """``optimizer.step()`` returned: the step's span ends."""
        if self._open is None:
            return
        self.enter("optimizer")
        start, last = self._open["start"], self._open["last"]
        self.steps.append(
            {"wall": last[0] - start[0], "cpu": last[1] - start[1], "phases": self._open["phases"]}
        )
        self._open, self.phase = None, None

    # ------------------------------------------------------------------ wrappers

    def starts_step(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` begins a step (it fetches the step's prompts)."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.begin_step()
            return fn(*args, **kwargs)

        return wrapper

    def generates(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` is the model's ``generate``: ``reward_advantage`` starts when it returns."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if self.phase == "generation":
                self.enter("reward_advantage")
            return out

        return wrapper

    def logprobs(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` computes log-probs: with autograd on, ``forward_backward`` starts; without, the call is
        ``logprobs`` and the phase before it resumes after it."""
        import torch

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled():
                if self.phase != "forward_backward":
                    self.enter("forward_backward")
                return fn(*args, **kwargs)
            before = self.phase
            self.enter("logprobs")
            try:
                return fn(*args, **kwargs)
            finally:
                if before is not None:
                    self.enter(before)

        return wrapper

    def clips(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` clips the gradient before the optimizer step: ``optimizer`` starts."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.phase == "forward_backward":
                self.enter("optimizer")
            return fn(*args, **kwargs)

        return wrapper


class Patches:
    """Attributes replaced by wrappers and hooks registered, undone by :meth:`restore` (a test's process
    goes on after the bench's wrapping)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def wrap(
        self, owner: Any, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
    ) -> None:
        """``owner.name = wrapper(owner.name)``, remembered. An attribute set on an instance is removed
        again (its class's method shows through), any other one set back."""
        before = owner.__dict__.get(name, None) if hasattr(owner, "__dict__") else None
        setattr(owner, name, wrapper(getattr(owner, name)))
        if before is None:
            self._undo.append(lambda: delattr(owner, name))
        else:
            self._undo.append(lambda: setattr(owner, name, before))

    def hook(self, handle: Any) -> None:
        """A hook handle, removed on :meth:`restore`."""
        self._undo.append(handle.remove)

    def restore(self) -> None:
        """Undo everything, last first."""
        while self._undo:
            self._undo.pop()()


def _common(clock: PhaseClock, patches: Patches) -> None:
    """The boundaries both sides share: ``generate``, the clip and the optimizer step (library code)."""
    import accelerate
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from transformers.generation.utils import GenerationMixin

    patches.wrap(GenerationMixin, "generate", clock.generates)
    patches.wrap(accelerate.Accelerator, "clip_grad_norm_", clock.clips)
    patches.hook(register_optimizer_step_post_hook(lambda *a, **k: clock.end_step()))


def instrument_trinity(clock: PhaseClock) -> Patches:
    """Wrap trinity's step start (``Explorer.rollout``) and log-prob calls (update and passes)."""
    from trinity_core.train.explorer import explorer
    from trinity_core.train.learner import passes, update

    patches = Patches()
    _common(clock, patches)
    patches.wrap(explorer.Explorer, "rollout", clock.starts_step)
    patches.wrap(update, "response_logprobs", clock.logprobs)
    patches.wrap(passes, "response_logprobs", clock.logprobs)
    return patches


def instrument_trl(clock: PhaseClock, trainer: Any) -> Patches:
    """Wrap TRL's step start (``get_batch_samples``) and log-prob calls on ``trainer``."""
    patches = Patches()
    _common(clock, patches)
    patches.wrap(trainer, "get_batch_samples", clock.starts_step)
    patches.wrap(trainer, "_get_per_token_logps_and_entropies", clock.logprobs)
    return patches
