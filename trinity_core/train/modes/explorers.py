"""The explorer processes of one machine, started and served by its leader learner rank.

Each explorer has its own bounded link (at most ``max(synchronizer.sync_offset, 1)`` steps wait in it),
its own error queue and ready event; all share the machine's weights channel, the stop event and, in
mode ``both``, the step gate (a counter each). :meth:`ExplorerSet.receive` takes step ``s`` from every
explorer in index order, each wait bounded and polling the explorer:

* an explorer that dies: with ``synchronizer.explorer_restarts`` left, a new process takes its index and
  starts at ``s`` (the first step the learner has not received from it) with the weights published now,
  on a new link (what the old one held is dropped, so no step arrives twice); else
  :class:`ExplorerFailed` names it, with its error or signal;
* an explorer that stays silent for ``synchronizer.timeout`` s (its start: :data:`STARTUP_S`):
  :class:`ExplorerFailed`.

No process outlives the run: :meth:`ExplorerSet.stop` ends them all (stop event, then SIGTERM, then
SIGKILL), and each explorer watches its leader and exits when it is gone.
"""

from __future__ import annotations

import pickle
import queue
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.multiprocessing as mp

from trinity_core import registry
from trinity_core.train.modes.explorer_process import POLL_S, ExplorerSpec, explorer_process
from trinity_core.train.modes.layout import Layout
from trinity_core.train.modes.step_gate import StepGate
from trinity_core.train.modes.synchronizer import WeightChannel
from trinity_core.train.modes.threads import child_environment

if TYPE_CHECKING:
    from trinity_core.train.modes.runner import Runner

__all__ = ["STARTUP_S", "STOP_GRACE_S", "ExplorerFailed", "ExplorerSet", "death_message", "explorer_context"]

STOP_GRACE_S = 5.0
"""Seconds the explorer processes get to end after the stop event before they are terminated."""
STARTUP_S = 600.0
"""Seconds an explorer process may take to start (imports, model) before ``synchronizer.timeout`` runs."""


class ExplorerFailed(RuntimeError):
    """An explorer process (mode ``async``, or ``synchronizer.explorer_process``) failed, died or went
    silent."""


@dataclass
class _Running:
    """One explorer process and what it was started with."""

    spec: ExplorerSpec
    process: Any
    restarts: int = 0


class ExplorerSet:
    """The explorer processes of this machine (``layout.local_explorers``), started at once.

    Args:
        runner: the run (config, steps, run directory).
        layout: the launch's layout (which explorers, their devices).
        channel: the machine's weights channel.
        threads: each explorer's torch thread budget.
        ordered: mode ``both``: a :class:`StepGate` keeps the explorers exactly ``sync_offset`` steps ahead.
    """

    def __init__(
        self, runner: Runner, layout: Layout, channel: WeightChannel, threads: int, ordered: bool
    ) -> None:
        """Start the machine's explorers at the run's first step."""
        config, indices = runner.config, layout.local_explorers
        self.config, self.layout, self.channel, self.threads = config, layout, channel, threads
        self.run_dir, self.start_step, self.total_steps = (
            runner.run_dir,
            runner.start_step,
            runner.total_steps,
        )
        self.ctx = explorer_context()
        self.stop_event = self.ctx.Event()
        self.registrations = registrations()
        offset = runner.synchronizer.offset
        self.gate = StepGate(self.ctx, offset, self.start_step, len(indices)) if ordered else None
        self.running: list[_Running] = []
        for slot, index in enumerate(indices):
            self.running.append(self._start(index, slot, self.start_step))

    def _start(self, index: int, slot: int, first_step: int) -> _Running:
        """Start explorer ``index`` (gate counter ``slot``) at ``first_step``."""
        config, layout = self.config, self.layout
        cpu = config.trainer.device == "cpu" or not _cuda()
        spec = ExplorerSpec(
            config=config,
            start_step=self.start_step,
            total_steps=self.total_steps,
            threads=self.threads,
            link=self.ctx.Queue(maxsize=max(config.synchronizer.sync_offset, 1)),
            errors=self.ctx.Queue(),
            stop=self.stop_event,
            ready=self.ctx.Event(),
            weights=self.channel,
            registrations=self.registrations,
            gate=self.gate,
            index=index,
            count=layout.explorers,
            slot=slot,
            first_step=first_step,
            device=layout.explorer_device(index, cpu, config.synchronizer.explorer_devices),
        )
        process = self.ctx.Process(
            target=explorer_process, args=(spec,), name=f"trinity-explorer-{index}", daemon=True
        )
        with child_environment(self.threads):  # read by OpenMP when the explorer imports torch
            process.start()
        return _Running(spec, process)

    # ------------------------------------------------------------------ experiences

    def receive(self, step: int) -> list[bytes]:
        """Step ``step`` from every explorer of the machine, in index order (encoded shipments)."""
        return [self._receive(i, step) for i in range(len(self.running))]

    def _receive(self, i: int, step: int) -> bytes:
        """The next shipment of explorer ``i``; restarts it or raises :class:`ExplorerFailed` when it dies,
        raises when it stays silent (``synchronizer.timeout``, counted from when it is ready)."""
        timeout = self.config.synchronizer.timeout
        began = start = time.perf_counter()
        while True:
            run = self.running[i]
            try:
                blob: bytes = run.spec.link.get(timeout=POLL_S)
                return blob
            except queue.Empty:
                now = time.perf_counter()
            if not run.process.is_alive():
                self._restart_or_fail(i, step)
                began = start = time.perf_counter()
            elif not run.spec.ready.is_set():
                start = now
                if now - began > STARTUP_S:
                    raise ExplorerFailed(
                        f"{self.name(run)} did not start within {STARTUP_S:g}s" + resume_hint(self.run_dir)
                    )
            elif now - start > timeout:
                raise ExplorerFailed(
                    f"{self.name(run)} sent no experiences for {timeout:g}s (learner step {step + 1}); raise "
                    "synchronizer.timeout if its steps are that slow" + resume_hint(self.run_dir)
                )

    def _restart_or_fail(self, i: int, step: int) -> None:
        """Explorer ``i`` has ended: start it again at ``step`` if restarts are left, else raise."""
        run, allowed = self.running[i], self.config.synchronizer.explorer_restarts
        why = death_message(self.name(run), run.spec, run.process, step)
        if run.restarts >= allowed:
            if allowed:
                why += f" (after {allowed} restart{'s' * (allowed > 1)}, synchronizer.explorer_restarts)"
            raise ExplorerFailed(why + resume_hint(self.run_dir))
        print(
            f"trinity train: warning: {why.splitlines()[0]}; starting it again at step {step} with the "
            f"weights of version {int(self.channel.version.value)} (restart {run.restarts + 1} of {allowed})",
            file=sys.stderr,
            flush=True,
        )
        _drop_queues(run.spec)
        fresh = self._start(run.spec.index, run.spec.slot, step)
        fresh.restarts = run.restarts + 1
        self.running[i] = fresh

    def check(self, next_step: int) -> None:
        """Restart or fail each explorer that has ended (the learner next needs step ``next_step``)."""
        for i, run in enumerate(self.running):
            if not run.process.is_alive():
                self._restart_or_fail(i, next_step)

    # ------------------------------------------------------------------ weights and the gate

    def publish(self, state: Any, version: int, step: int) -> None:
        """Publish the weights of learner step ``step`` (version ``version``); with the gate, once every
        explorer has started rollout ``step + sync_offset`` with the older ones."""
        gate = self.gate
        if gate is not None and step + gate.offset < self.total_steps:
            try:
                gate.wait(
                    lambda: gate.learner_may_publish(step),
                    lambda: self.check(step + 1),
                    timeout=self.config.synchronizer.timeout,
                    poll_s=POLL_S,
                    what=f"the explorer to start step {step + gate.offset + 1} (learner step {step + 1})",
                )
            except TimeoutError as exc:
                late = [r for r in self.running if gate.started[r.spec.slot] < step + gate.offset]
                names = ", ".join(self.name(r) for r in late)
                raise ExplorerFailed(f"{names} is stuck: {exc}" + resume_hint(self.run_dir)) from None
        self.channel.publish(state, version)

    def mark_learned(self, step: int) -> None:
        """The learner has finished step ``step`` (and published its weights when due)."""
        if self.gate is not None:
            self.gate.mark_learned(step)

    # ------------------------------------------------------------------ the end

    def stop(self) -> None:
        """End every explorer: the stop event, then SIGTERM, then SIGKILL; each bounded."""
        self.stop_event.set()
        processes = [run.process for run in self.running]
        _join(processes, STOP_GRACE_S)
        for process in processes:
            if process.is_alive():
                process.terminate()
        _join(processes, STOP_GRACE_S)
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        for run in self.running:
            _drop_queues(run.spec)

    def name(self, run: _Running) -> str:
        """How messages name an explorer process."""
        layout, pid = self.layout, run.process.pid
        if layout.explorers == 1:
            return f"the explorer process (pid {pid})"
        where = f", machine {layout.machine}" if layout.machines > 1 else ""
        return f"explorer process {run.spec.index} of {layout.explorers} (pid {pid}{where})"


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _join(processes: list[Any], seconds: float) -> None:
    """Wait for ``processes`` to end, at most ``seconds`` in all."""
    deadline = time.perf_counter() + seconds
    for process in processes:
        process.join(max(0.0, deadline - time.perf_counter()))


def _drop_queues(spec: ExplorerSpec) -> None:
    """What is left in an explorer's queues is dropped, not waited for."""
    spec.link.cancel_join_thread()
    spec.errors.cancel_join_thread()


def explorer_context() -> Any:
    """The multiprocessing context that starts explorer processes.

    A fork server with the explorer's module (torch, transformers) imported once: only the first explorer
    of a Python process pays for those imports, later runs in the same process (a notebook, a sweep, a
    test session) start theirs at once. The server is started with the first explorer's environment
    (:func:`~trinity_core.train.modes.threads.child_environment`); each explorer sets its own thread count.
    It never touches CUDA, so its children may. Spawn where there is no fork server (Windows).
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["trinity_core.train.modes.explorer_process"])
    return ctx


def resume_hint(run_dir: Path) -> str:
    """How to continue after the run stopped: the last checkpoint, or a new start."""
    latest = run_dir / "checkpoints" / "latest"
    if latest.exists():
        name = latest.read_text().strip()
        return f"\ncheckpoint {name} is intact: continue with trinity train --resume {run_dir}"
    return f"\nno checkpoint was written yet: start again with --overwrite --run-dir {run_dir}"


def death_message(name: str, spec: Any, process: Any, step: int) -> str:
    """Why explorer process ``name`` ended, for the learner's error message."""
    process.join(STOP_GRACE_S)
    where = f"{name} ended before learner step {step + 1}"
    try:
        trace: str = spec.errors.get(timeout=POLL_S)
    except queue.Empty:
        code = process.exitcode
        if code is not None and code < 0:
            return f"{where}: killed by signal {signal.Signals(-code).name}"
        # It failed before its own code ran: while starting, e.g. importing the main module (stderr says why).
        return (
            f"{where} with exit code {code} and no error report; its own message is on stderr above. "
            'A script that calls train() must guard its top level with `if __name__ == "__main__":` '
            "(the explorer process imports the script again when it starts)"
        )
    last = trace.strip().splitlines()[-1]
    return f"{where}: {last}\nthe explorer's traceback:\n{trace.rstrip()}"


def registrations() -> list[tuple[str, str, Any, bool]]:
    """The in-process registry entries that can travel to the explorer process (picklable objects)."""
    found = []
    # A started process has none of them (it imports the modules afresh, or forks from the server).
    for record, replace in registry.get_registry().in_process():
        try:
            pickle.dumps(record.obj)
        except Exception:  # a lambda or local class stays behind; a run that names it fails there
            continue
        found.append((record.kind, record.name, record.obj, replace))
    return found
