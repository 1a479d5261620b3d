"""The explorer process of mode ``async``: rollouts with the latest published weights, into the link.

Spawned by :func:`trinity_core.train.modes.async_mode.run_async`. Each step::

    weights   = WeightChannel.load_newer(...)          # the learner's latest version, if newer
    explored  = Explorer.rollout(step); Explorer.write(explored)   # as in mode both
    shipment  = experiences + explorer metrics   -> link (bounded: at most synchronizer.sync_offset or 1
                                                    steps wait there; a full link waits <= timeout)

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
import pickle
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
from trinity_core.train.modes.step_gate import StepGate
from trinity_core.train.modes.synchronizer import WeightChannel
from trinity_core.train.report.profile import StepProfiler

__all__ = ["POLL_S", "ExplorerSpec", "LearnerGone", "Shipment", "build_explorer", "explorer_process"]

POLL_S = 0.2
"""Seconds between checks of the other process while a side waits on the link."""


class LearnerGone(RuntimeError):
    """The learner process ended or asked the explorer to stop."""


@dataclass
class Shipment:
    """One explorer step, as it crosses to the learner process."""

    step: int
    experiences: bytes
    """The step's experiences in the columnar wire format (:func:`trinity_core.codec.serialize_many`):
    one tensor per field for the whole step, where pickling them one by one takes seconds."""
    metrics: dict[str, float]
    idle_fraction: float
    """Share of the explorer's wall time so far spent waiting for room in the link."""


@dataclass
class ExplorerSpec:
    """Everything the explorer process needs; picklable (handed over at spawn)."""

    config: ResolvedConfig
    start_step: int
    total_steps: int
    threads: int
    link: Any
    """A bounded queue of pickled :class:`Shipment`."""
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


def build_explorer(
    config: ResolvedConfig, start_step: int, writer: Any, loop: asyncio.AbstractEventLoop
) -> Explorer:
    """The explorer process's :class:`Explorer`, writing to ``writer``: its task, rewards and prompts as the
    learner process has them, and a frozen policy built as the learner's is (dtype, LoRA adapters), so
    that the learner's weights load into it by name."""
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
    cpu = config.trainer.device == "cpu" or not torch.cuda.is_available()
    model.to(torch.device("cpu" if cpu else "cuda"))
    return Explorer(
        config,
        rank=0,
        prompts_per_rank=config.rollout.prompts_per_step,
        task=task,
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
    # A stream of its own per start step: a resumed run does not replay the first run's tasks.
    torch.manual_seed(config.trainer.seed * 1_000_003 + 17 * spec.start_step + 1)
    writer, reader = make_buffer("memory")
    loop = asyncio.new_event_loop()
    explorer = build_explorer(config, spec.start_step, writer, loop)
    model = explorer.policy
    explorer.version = spec.weights.load_newer(model, -1)
    spec.ready.set()
    idle, began = 0.0, time.perf_counter()
    try:
        for step in range(spec.start_step, spec.total_steps):
            _check_learner(spec)
            if spec.gate is not None:
                idle += _await_learner(spec, spec.gate, step)
            explorer.version = spec.weights.load_newer(model, explorer.version)
            if spec.gate is not None:
                spec.gate.mark_started(step)
            metrics = explorer.write(explorer.rollout(step))
            experiences = loop.run_until_complete(reader.read())
            reader.discard_read()  # type: ignore[attr-defined]
            shipment = Shipment(
                step,
                serialize_many(experiences),
                {k: float(v) for k, v in metrics.items()},
                idle / max(time.perf_counter() - began, 1e-9),
            )
            idle += _put(spec, pickle.dumps(shipment), step)
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
