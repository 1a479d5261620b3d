"""Weights from the learner to the explorer: interval, offset, policy versions and staleness.

The learner's policy *version* is the number of updates it has made. After every
``synchronizer.sync_interval`` learner steps the synchronizer hands a copy of the learner's weights
(and their version) to the explorer; the explorer runs ``synchronizer.sync_offset`` steps ahead of the
learner, so with offset 1 the rollout of step ``t + 1`` is generated while step ``t`` trains. Every
experience records the version that sampled it (``info["model_version"]``), and the learner measures
its *staleness* (:mod:`trinity_core.train.learner.staleness`).

Lock step (interval 1, offset 0) needs no copy: the explorer samples with the learner's own weights.
In mode ``async`` the explorer is another process and the weights travel through a
:class:`WeightChannel` (``synchronizer.method``: shared memory or a file in the run directory).
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

__all__ = ["InlineExecutor", "Synchronizer", "WeightChannel"]

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
    """The learner's weights and their version, from the learner process to the explorer process.

    ``memory``: one shared-memory copy of the weights, overwritten in place under a lock;
    ``checkpoint``: a safetensors file ``<sync_dir>/policy.safetensors``, replaced atomically. Either
    way a shared counter holds the version last published, so the explorer reloads only newer weights.
    Made in the learner process and handed to the explorer process when it is spawned.

    Args:
        method: ``synchronizer.method``.
        policy: the learner's model; its weights of version ``version`` are published at once.
        sync_dir: where the ``checkpoint`` method writes its file.
        ctx: the multiprocessing context whose lock and shared value the two processes use
            (:func:`~trinity_core.train.modes.async_mode.explorer_context`).
    """

    def __init__(
        self, method: Literal["memory", "checkpoint"], policy: Any, version: int, sync_dir: Path, ctx: Any
    ) -> None:
        """Publish ``policy``'s weights as version ``version``."""
        self.method, self.path = method, sync_dir / "policy.safetensors"
        self.lock = ctx.Lock()
        self.version = ctx.Value("q", -1, lock=False)
        self.shared: dict[str, Tensor] | None = None
        if method == "memory":
            shared = _cpu_copy(policy)
            for value in shared.values():
                value.share_memory_()  # type: ignore[no-untyped-call]
            self.shared = shared
        else:
            sync_dir.mkdir(parents=True, exist_ok=True)
        self.publish(policy, version)

    def publish(self, policy: Any, version: int) -> None:
        """Make ``policy``'s weights, of version ``version``, the ones the explorer loads next."""
        if self.shared is None:
            tmp = self.path.with_suffix(".tmp")
            save_file(_cpu_copy(policy), str(tmp), metadata={"version": str(version)})
            os.replace(tmp, self.path)  # the explorer reads a whole file, old or new
        with self.lock:
            if self.shared is not None:
                for name, value in policy.state_dict().items():
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


def _cpu_copy(policy: Any) -> dict[str, Tensor]:
    """A CPU copy of ``policy``'s weights (what another process can map or a file can hold)."""
    return {name: value.detach().to("cpu", copy=True) for name, value in policy.state_dict().items()}
