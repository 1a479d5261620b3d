"""Weights from the learner to the explorer: interval, offset, policy versions and staleness.

The learner's policy *version* is the number of updates it has made. After every
``synchronizer.sync_interval`` learner steps the synchronizer hands a copy of the learner's weights
(and their version) to the explorer; the explorer runs ``synchronizer.sync_offset`` steps ahead of the
learner, so with offset 1 the rollout of step ``t + 1`` is generated while step ``t`` trains. Every
experience records the version that sampled it (``info["model_version"]``), and the learner measures
its *staleness* (:mod:`trinity_core.train.learner.staleness`).

Lock step (interval 1, offset 0) needs no copy: the explorer samples with the learner's own weights.
In mode ``async`` the explorers are other processes and the weights travel through a
:class:`WeightChannel` (``synchronizer.method``: shared memory or a file in the run directory); to
other machines' channels by a broadcast (:mod:`trinity_core.train.modes.groups`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, Literal, TypeVar

from safetensors.torch import load, save_file
from torch import Tensor

from trinity_core.config import SynchronizerConfig

__all__ = ["InlineExecutor", "Synchronizer", "WeightChannel", "cpu_copy"]

_T = TypeVar("_T")


class Synchronizer:
    """When the explorer gets new weights, and the copy it gets.

    Args:
        config: the ``synchronizer`` section.
    """

    def __init__(self, config: SynchronizerConfig) -> None:
        """Keep the interval and the offset."""
        self.interval = config.sync_interval
        self.offset = config.sync_offset

    @property
    def shares_weights(self) -> bool:
        """Lock step: the explorer can sample with the learner's model itself (nothing to copy)."""
        return self.interval == 1 and self.offset == 0

    def due(self, learner_version: int) -> bool:
        """Whether the learner's weights go to the explorer now that it has reached ``learner_version``."""
        return learner_version % self.interval == 0

    @staticmethod
    def snapshot(policy: Any) -> dict[str, Tensor]:
        """A copy of ``policy``'s weights that later updates of the learner do not change."""
        return {name: value.detach().clone() for name, value in policy.state_dict().items()}


class InlineExecutor(Executor):
    """An executor that runs each task at once in the caller's thread (lock step: nothing overlaps)."""

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        """Run ``fn(*args, **kwargs)`` now; its result or exception is in the returned future."""
        future: Future[_T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller by future.result(), as a thread pool does
            future.set_exception(exc)
        return future


class WeightChannel:
    """The learner's weights and their version, from a learner rank to the explorer processes of its machine.

    ``memory``: one shared-memory copy of the weights, overwritten in place under a lock;
    ``checkpoint``: a safetensors file ``<sync_dir>/policy.safetensors``, replaced atomically (written by
    rank 0 only: on several machines ``sync_dir`` is on a filesystem they share). Either way a shared
    counter holds the version last published, so the explorers reload only newer weights. Made in the
    learner process and handed to the explorer processes when they are started.

    Args:
        method: ``synchronizer.method``.
        state: the learner's full weights of version ``version``, published at once (None where this
            rank writes no file: ``checkpoint`` on another machine than rank 0's).
        sync_dir: where the ``checkpoint`` method's file is.
        ctx: the multiprocessing context whose lock and shared value the processes use
            (:func:`~trinity_core.train.modes.explorers.explorer_context`).
    """

    def __init__(
        self,
        method: Literal["memory", "checkpoint"],
        state: dict[str, Tensor] | None,
        version: int,
        sync_dir: Path,
        ctx: Any,
    ) -> None:
        """Publish ``state`` as version ``version``."""
        self.method, self.path = method, sync_dir / "policy.safetensors"
        self.lock = ctx.Lock()
        self.version = ctx.Value("q", -1, lock=False)
        self.shared: dict[str, Tensor] | None = None
        if method == "memory":
            if state is None:
                raise ValueError("the memory method publishes weights: state is required")
            shared = cpu_copy(state)
            for value in shared.values():
                value.share_memory_()  # type: ignore[no-untyped-call]
            self.shared = shared
        elif state is not None:
            sync_dir.mkdir(parents=True, exist_ok=True)
        self.publish(state, version)

    def publish(self, state: dict[str, Tensor] | None, version: int) -> None:
        """Make ``state``, the weights of version ``version``, the ones the explorers load next (None:
        ``checkpoint`` written by another rank, only the version moves)."""
        if self.shared is None and state is not None:
            tmp = self.path.with_suffix(".tmp")
            save_file(cpu_copy(state), str(tmp), metadata={"version": str(version)})
            os.replace(tmp, self.path)  # the explorer reads a whole file, old or new
        with self.lock:
            if self.shared is not None:
                assert state is not None
                for name, value in state.items():
                    self.shared[name].copy_(value)
            self.version.value = version

    def load_newer(self, policy: Any, current: int) -> int:
        """Load the published weights into ``policy`` if newer than version ``current``; return the version
        ``policy`` now has."""
        with self.lock:
            version = int(self.version.value)
            if version <= current:
                return current
            if self.shared is not None:
                policy.load_state_dict(self.shared)
                return version
        # Read once: the file may already hold a later version than the counter said, and its header says
        # which (8 bytes of header length, then the JSON header).
        raw = self.path.read_bytes()
        header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
        policy.load_state_dict(load(raw))
        return int(header["__metadata__"]["version"])


def cpu_copy(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A CPU copy of the weights ``state`` (what another process can map or a file can hold)."""
    return {name: value.detach().to("cpu", copy=True) for name, value in state.items()}
