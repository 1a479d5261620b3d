"""The explorer's request queue: model calls of concurrent episodes gathered into one ``generate``.

Every episode of a step is registered up front. A call waits until every unfinished episode is waiting
on a call too; then the whole set is sampled in one batched call (in episode order, so the batch never
depends on which thread came first). A step of episodes that each take ``t`` turns therefore costs
``max t`` generate calls, not ``episodes x t``.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from trinity_core.experience import Experience
from trinity_core.workflows.engine import GenerationEngine, Request

__all__ = ["GenerateQueue"]


class GenerateQueue:
    """Gathers the requests of ``episodes`` concurrent episodes (thread-safe)."""

    def __init__(self, engine: GenerationEngine, episodes: int) -> None:
        """Nothing is pending; ``episodes`` episodes are running."""
        self.engine = engine
        self._lock = threading.Lock()
        self._pending: list[tuple[Request, Future[list[Experience]]]] = []
        self._active = episodes
        self.batch_sizes: list[int] = []
        """Requests per batched call, in order (for metrics and the benchmark)."""

    def submit(self, request: Request) -> Future[list[Experience]]:
        """Queue ``request``; its future resolves when its batch has been sampled."""
        future: Future[list[Experience]] = Future()
        with self._lock:
            self._pending.append((request, future))
            batch = self._take()
        if batch:
            self._flush(batch)
        return future

    def finish(self) -> None:
        """One episode ended (returned or failed): the others may no longer need to wait for it."""
        with self._lock:
            self._active -= 1
            batch = self._take()
        if batch:
            self._flush(batch)

    def _take(self) -> list[tuple[Request, Future[list[Experience]]]]:
        waiting = {request.key for request, _ in self._pending}
        if not self._pending or len(waiting) < self._active:
            return []
        batch, self._pending = self._pending, []
        return batch

    def _flush(self, batch: list[tuple[Request, Future[list[Experience]]]]) -> None:
        # Runs in the thread of the last request (every other episode is waiting, so nothing races it).
        batch.sort(key=lambda item: item[0].key)
        self.batch_sizes.append(len(batch))
        try:
            results = self.engine.run([request for request, _ in batch])
        except BaseException as exc:  # every waiting episode learns of the failure
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            future.set_result(result)
