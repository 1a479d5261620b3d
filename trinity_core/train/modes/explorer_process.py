"""An explorer process of mode ``async``: rollouts with the latest published weights, into the link.

Started by :class:`trinity_core.train.modes.explorers.ExplorerSet`. Each step::

    weights   = WeightChannel.load_newer(...)          # the learner's latest version, if newer
    explored  = Explorer.rollout(step); Explorer.write(explored)   # as in mode both
    shipment  = experiences + explorer metrics   -> link (bounded: at most synchronizer.sync_offset or 1
                                                    steps wait there; a full link waits <= timeout)

Explorer ``e`` of ``M`` draws every step's ``P`` tasks from the run's task stream, the same in every
explorer, and keeps its share ``[e·P/M, (e+1)·P/M)`` (:class:`TaskShare`); a restarted explorer draws
and drops the steps before the one it starts at, so it makes the same tasks its predecessor would have.

With a :class:`~trinity_core.train.modes.step_gate.StepGate` (mode ``both`` with
``synchronizer.explorer_process``) rollout ``step`` first waits for the learner's step
``step - sync_offset - 1``, so the explorer runs exactly ``sync_offset`` steps ahead, as its thread would.

It stops with an error message when the learner process is gone or the link stays full for
``synchronizer.timeout`` seconds, and quietly when the learner sets ``stop``. Ctrl-C is left to the
learner process, which stops this one.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from trinity_core import registry
from trinity_core.buffer import make_buffer
from trinity_core.codec import serialize_many
from trinity_core.config import ResolvedConfig
from trinity_core.hooks import get_plugin_manager
from trinity_core.train.build import build_components
from trinity_core.train.data.prompts import build_prompter
from trinity_core.train.data.rewards import build_rewards
from trinity_core.train.data.tasks import build_task
from trinity_core.train.explorer.explorer import Explorer
from trinity_core.train.models.dtype import weights_dtype
from trinity_core.train.models.policy import load_policy, prepare_policy
from trinity_core.train.modes.shipments import Shipment
from trinity_core.train.modes.step_gate import StepGate
from trinity_core.train.modes.synchronizer import WeightChannel
from trinity_core.train.report.profile import StepProfiler

__all__ = ["POLL_S", "ExplorerSpec", "LearnerGone", "TaskShare", "build_explorer", "explorer_process"]

POLL_S = 0.2
"""Seconds between checks of the other process while a side waits on the link."""


class LearnerGone(RuntimeError):
    """The learner process ended or asked the explorer to stop."""


@dataclass
class ExplorerSpec:
    """Everything the explorer process needs; picklable (handed over at spawn)."""

    config: ResolvedConfig
    start_step: int
    total_steps: int
    threads: int
    link: Any
    """A bounded queue of encoded :class:`~trinity_core.train.modes.shipments.Shipment` (bytes)."""
    errors: Any
    """A queue for the explorer's traceback when it fails."""
    stop: Any
    """An event the learner sets when the explorer must end."""
    ready: Any
    """An event the explorer sets once built (the learner's wait bound starts then)."""
    weights: WeightChannel
    registrations: list[tuple[str, str, Any, bool]] = field(default_factory=list)
    """The learner process's in-process registry entries ``(kind, name, object, replace)``."""
    gate: StepGate | None = None
    """Mode ``both``'s explorer process: keeps the explorer exactly ``sync_offset`` steps ahead (None:
    mode ``async``, the explorer runs ahead freely)."""
    index: int = 0
    """This explorer's index ``e`` among the run's ``count``; its share of each step's prompts."""
    count: int = 1
    slot: int = 0
    """Its counter in ``gate`` (its position among its machine's explorers)."""
    first_step: int | None = None
    """The step it starts at (a restart: the first step the learner has not received); None: start_step."""
    device: str | None = None
    """Its torch device; None: CUDA when the run is on a GPU, else the CPU."""


def explorer_process(spec: ExplorerSpec) -> None:
    """The process's entry: run the explorer; on failure put the traceback on ``spec.errors``, exit 1."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the learner, which stops us
    try:
        _explore(spec)
    except LearnerGone as exc:
        if spec.stop.is_set():  # the run's normal end, or the learner's own error (it reports that)
            raise SystemExit(0) from None
        print(f"trinity train: the explorer process stops: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except BaseException:
        spec.errors.put(traceback.format_exc())
        raise SystemExit(1) from None


class TaskShare:
    """Explorer ``index`` of ``count``'s share of a task: each draw takes the whole step's rows from the
    generator (the same rows whatever the count) and keeps this explorer's slice; everything else is the
    task's."""

    def __init__(self, task: Any, index: int, count: int) -> None:
        """Wrap ``task``."""
        self.task, self.index, self.count = task, index, count

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """This explorer's ``n`` of the step's ``n * count`` rows."""
        rows: list[dict[str, Any]] = self.task.sample(n * self.count, generator)
        return rows[self.index * n : (self.index + 1) * n]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)


def build_explorer(
    config: ResolvedConfig,
    start_step: int,
    writer: Any,
    loop: asyncio.AbstractEventLoop,
    *,
    index: int = 0,
    count: int = 1,
    device: str | None = None,
) -> Explorer:
    """Explorer ``index`` of ``count`` of an explorer process, writing to ``writer``: its task share,
    rewards and prompts as the learner process has them, and a frozen policy on ``device`` built as the
    learner's is (dtype, LoRA adapters), so that the learner's weights load into it by name."""
    seed = config.trainer.seed
    task = build_task(config)
    model, tokenizer = load_policy(
        config.model.model_path,
        config.model.tokenizer_path,
        config.model.config,
        task.alphabet(),
        seed=seed,
        dtype=weights_dtype(config),
    )
    model = prepare_policy(model, config)
    model.requires_grad_(False)
    if device is None:
        device = "cpu" if config.trainer.device == "cpu" or not torch.cuda.is_available() else "cuda"
    model.to(torch.device(device))
    return Explorer(
        config,
        rank=index,
        prompts_per_rank=config.rollout.prompts_per_step // count,
        task=TaskShare(task, index, count) if count > 1 else task,
        rewards=build_rewards(config, task),
        tokenizer=tokenizer,
        policy=model,
        components=build_components(config, writer),
        writer=writer,
        pm=get_plugin_manager(),
        task_gen=torch.Generator().manual_seed(seed * 7919 + start_step),
        profiler=StepProfiler(False, torch.device("cpu")),
        event_loop=loop,
        prompter=build_prompter(tokenizer, config.model.chat_template, task),
    )


def _explore(spec: ExplorerSpec) -> None:
    config = spec.config
    for kind, name, obj, replace in spec.registrations:
        registry.register(kind, name, obj, replace=replace)
    torch.set_num_threads(spec.threads)
    first = spec.start_step if spec.first_step is None else spec.first_step
    # A sampling stream of its own per explorer and start step: a resumed run does not replay the first
    # run's samples, and explorers do not sample alike.
    torch.manual_seed(config.trainer.seed * 1_000_003 + 17 * first + 1 + 104_729 * spec.index)
    writer, reader = make_buffer("memory")
    loop = asyncio.new_event_loop()
    explorer = build_explorer(
        config, spec.start_step, writer, loop, index=spec.index, count=spec.count, device=spec.device
    )
    for _ in range(spec.start_step, first):  # a restart: the tasks of the steps already delivered
        explorer.task.sample(explorer.prompts_per_rank, explorer.task_gen)
    model = explorer.policy
    explorer.version = spec.weights.load_newer(model, -1)
    spec.ready.set()
    idle, began = 0.0, time.perf_counter()
    try:
        for step in range(first, spec.total_steps):
            _check_learner(spec)
            if spec.gate is not None:
                idle += _await_learner(spec, spec.gate, step)
            explorer.version = spec.weights.load_newer(model, explorer.version)
            if spec.gate is not None:
                spec.gate.mark_started(step, spec.slot)
            metrics = explorer.write(explorer.rollout(step))
            experiences = loop.run_until_complete(reader.read())
            reader.discard_read()  # type: ignore[attr-defined]
            shipment = Shipment(
                spec.index,
                step,
                serialize_many(experiences),
                {k: float(v) for k, v in metrics.items()},
                idle / max(time.perf_counter() - began, 1e-9),
            )
            idle += _put(spec, shipment.encode(), step)
        # Wait until the learner has taken the last steps (the link's data must leave this process).
        while True:
            _check_learner(spec)
            time.sleep(POLL_S)
    finally:
        loop.close()


def _check_learner(spec: ExplorerSpec) -> None:
    if spec.stop.is_set():
        raise LearnerGone("the learner process asked it to stop")
    parent = multiprocessing.parent_process()
    if parent is not None and not parent.is_alive():
        raise LearnerGone(f"the learner process (pid {parent.pid}) is gone")


def _await_learner(spec: ExplorerSpec, gate: StepGate, step: int) -> float:
    """Wait until rollout ``step`` may start (the learner is at most ``sync_offset`` steps behind)."""
    return gate.wait(
        lambda: gate.explorer_may_start(step),
        lambda: _check_learner(spec),
        timeout=spec.config.synchronizer.timeout,
        poll_s=POLL_S,
        what=f"the learner's step {step - gate.offset} before explorer step {step + 1}",
    )


def _put(spec: ExplorerSpec, payload: bytes, step: int) -> float:
    """Put ``payload`` on the link, waiting at most ``synchronizer.timeout`` s; return the seconds waited."""
    timeout, start = spec.config.synchronizer.timeout, time.perf_counter()
    while True:
        try:
            spec.link.put(payload, timeout=POLL_S)
            return time.perf_counter() - start
        except queue.Full:
            _check_learner(spec)
            if time.perf_counter() - start > timeout:
                raise TimeoutError(
                    f"the buffer stayed full for {timeout:g}s: the learner took no experiences after "
                    f"explorer step {step}; raise synchronizer.timeout if learner steps are that slow"
                ) from None
